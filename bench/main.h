// A benchmark's main(): its run function with the errors every bench reports the same way.
#pragma once

#include <fmt/format.h>

#include <exception>

#include "support/error.h"

namespace mkc::bench {

// A benchmark's main: runs `run`; a UserError (a bad flag) exits 1, any other error 2, each
// printed as "NAME: error: ...".
inline int guarded_main(const char* name, int (*run)(int, char**), int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const mkc::UserError& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: error: {}\n", name, e.what());
    return 2;
  }
}

}  // namespace mkc::bench
