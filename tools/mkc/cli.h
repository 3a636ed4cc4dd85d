// The `mkc` command line as a function, so tests drive it in-process with captured streams.
// Exit codes: 0 success, 1 user error (bad schedule, bad flag), 2 environment or internal error.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

namespace mkc::cli {

struct Terminal {
  bool err_is_tty = false;  // colour diagnostics on stderr (unless --color=never or NO_COLOR)
  // The process ends when the command returns (the `mkc` binary, not a test calling run): a
  // compile may leave its plan unfreed (cli.cc, Burial).
  bool process_exits = false;
};

int run(const std::vector<std::string>& args, std::ostream& out, std::ostream& err,
        Terminal term = {});

}  // namespace mkc::cli
