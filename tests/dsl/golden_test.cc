// One golden file per diagnostic kind: tests/dsl/golden/<kind>.mks is a bad schedule and
// <kind>.expected is exactly what `mkc check` prints for it (stderr). A kind without its pair
// fails the test, so a new kind cannot be added without a golden test. A first line
// `# args: ...` passes extra flags to `mkc check`.
//
// To regenerate after an intended change of wording: tools/update_golden.sh, then review the diff.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "dsl/diagnostic_kinds.h"
#include "tools/mkc/cli.h"

namespace mkc {
namespace {

const std::string kDir = "tests/dsl/golden/";

bool read_file(const std::string& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  *out = ss.str();
  return true;
}

std::vector<std::string> split_words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

void check_golden(const std::string& kind) {
  const std::string input = kDir + kind + ".mks";
  std::string text, expected;
  REQUIRE_MESSAGE(read_file(input, &text), "no golden input for kind `" << kind << "`: " << input);
  REQUIRE_MESSAGE(read_file(kDir + kind + ".expected", &expected),
                  "no expected output for kind `" << kind << "`");
  std::vector<std::string> args = {"check"};
  if (text.rfind("# args:", 0) == 0) {
    for (const std::string& w : split_words(text.substr(7, text.find('\n') - 7))) args.push_back(w);
  }
  args.push_back(input);
  std::ostringstream out, err;
  const int code = cli::run(args, out, err);
  CHECK(code == 1);
  CHECK_MESSAGE(err.str().find("[" + kind + "]") != std::string::npos,
                "the output for `" << kind << "` has no diagnostic of that kind");
  CHECK_MESSAGE(err.str() == expected, "mkc check " << input << " printed:\n"
                                                    << err.str() << "\nexpected:\n"
                                                    << expected);
}

// One test case per kind, generated from the list of kinds.
#define MKC_GOLDEN_CASE(e, name, meaning) \
  TEST_CASE("golden: " name) {            \
    check_golden(name);                   \
  }
MKC_DIAGNOSTIC_KINDS(MKC_GOLDEN_CASE)
#undef MKC_GOLDEN_CASE

TEST_CASE("golden: every file in the folder belongs to a diagnostic kind") {
  const std::set<std::string> kinds = {
#define MKC_KIND_NAME(e, name, meaning) name,
      MKC_DIAGNOSTIC_KINDS(MKC_KIND_NAME)
#undef MKC_KIND_NAME
  };
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(kDir)) {
    const std::string stem = entry.path().stem().string();
    CHECK_MESSAGE(kinds.count(stem) == 1,
                  "golden file " << entry.path() << " names no diagnostic kind");
    ++files;
  }
  CHECK(files == 2 * static_cast<int>(kinds.size()));
}

}  // namespace
}  // namespace mkc
