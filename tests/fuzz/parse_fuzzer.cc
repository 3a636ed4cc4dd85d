// libFuzzer target: any bytes through the parser, the checker and the diagnostics renderer. It
// must never crash, leak, hang or trip a sanitizer. Built and run by tools/fuzz.sh (clang 14), not
// by Bazel.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "compiler/sema/check.h"
#include "dsl/ast_json.h"
#include "dsl/diagnostics.h"
#include "dsl/parser.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = std::make_shared<mkc::dsl::SourceFile>(
      "fuzz.mks", std::string(reinterpret_cast<const char*>(data), size));
  mkc::dsl::Diagnostics diags;
  const mkc::dsl::Module module = mkc::dsl::parse(file, diags);
  (void)mkc::dsl::dump_json(mkc::dsl::to_json(module));
  if (!diags.has_errors()) {
    mkc::compiler::CheckOptions opts;
    opts.ranks = {2};
    (void)mkc::compiler::check(module, opts, diags);
  }
  (void)mkc::dsl::render_text(diags.all(), true);
  for (const auto& d : diags.all()) (void)mkc::dsl::dump_json(mkc::dsl::to_json(d));
  return 0;
}
