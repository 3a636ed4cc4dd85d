// The registry: every TaskKind of plan.h's MKC_TASK_KINDS to its Kind (one file each in this
// folder), and what is common to all kinds.
#include <fmt/format.h>

#include "compiler/kinds/kind.h"
#include "compiler/kinds/kinds.h"
#include "compiler/sema/device_code.h"
#include "support/error.h"

namespace mkc::kinds {

std::string Source::type_of(const Task& t, size_t view) const {
  return compiler::cuda_type(dtype(t, view));
}

void Kind::emit(Source&, const Task&) const {
  throw InternalError(fmt::format("task kind {} has no device code to emit", name()));
}

void Kind::emit_chain(Source&, const Task&) const {
  throw InternalError(fmt::format("task kind {} does not run as chains", name()));
}

const Kind& kind_of(TaskKind k) {
  static const Kind* const table[] = {
#define MKC_KIND_ENTRY(e, name, is_comm) &kind<TaskKind::e>(),
      MKC_TASK_KINDS(MKC_KIND_ENTRY)
#undef MKC_KIND_ENTRY
  };
  const size_t i = static_cast<size_t>(k);
  if (i >= sizeof(table) / sizeof(table[0]))
    throw InternalError(fmt::format("task kind {} is not in the registry", i));
  return *table[i];
}

std::string class_key(const Source& s, const Task& t) {
  const Kind& k = kind_of(t);
  std::string key = k.name() + k.key_tag(s, t);
  for (size_t v = 0; v < t.views.size(); ++v)
    key += std::string(":") + compiler::dtype_name(s.dtype(t, v));
  return key + k.key_variant(s, t);
}

}  // namespace mkc::kinds
