// Runs a shell command line from a test (tools/mkrun jobs, the mkc binary): its exit status and
// its stdout and stderr together.
#pragma once

#include <string>
#include <utility>

namespace mkc::testing {

// Exit status (-1 when the command did not exit normally) and the combined output.
std::pair<int, std::string> run_command(const std::string& cmd);

// `name` in the test's scratch directory ($TEST_TMPDIR under Bazel, else /tmp): where a test writes
// the input files it hands to a command.
std::string temp_path(const std::string& name);

}  // namespace mkc::testing
