#include "support/phases.h"

#include <sys/resource.h>

namespace mkc {

long long peak_resident_bytes() {
  struct rusage u {};
  if (getrusage(RUSAGE_SELF, &u) != 0) return 0;
  return static_cast<long long>(u.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace mkc
