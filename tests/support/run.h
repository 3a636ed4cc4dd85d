// Runs a shell command line from a test (tools/mkrun jobs, the mkc binary): its exit status and
// its stdout and stderr together.
#pragma once

#include <string>
#include <utility>

namespace mkc::testing {

// Exit status (-1 when the command did not exit normally) and the combined output.
std::pair<int, std::string> run_command(const std::string& cmd);

}  // namespace mkc::testing
