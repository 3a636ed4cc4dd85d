// MKC_CHECK(cond, msg...) guards invariants of mkc itself ("cannot happen"). It is never used for
// the user's mistakes, which get diagnostics (dsl/diagnostics.h) or a UserError with a hint.
#pragma once

#include <fmt/format.h>

#include "support/error.h"

#define MKC_CHECK(cond, ...)                                                                  \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      ::mkc::internal_check_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
    }                                                                                         \
  } while (0)
