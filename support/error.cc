#include "support/error.h"

#include <fmt/format.h>

namespace mkc {

void internal_check_failed(const char* cond, const char* file, int line, const std::string& msg) {
  throw InternalError(
      fmt::format("internal error: {}:{}: check `{}` failed{}{} (this is a bug "
                  "in mkc; please report it with the schedule that caused it)",
                  file, line, cond, msg.empty() ? "" : ": ", msg));
}

}  // namespace mkc
