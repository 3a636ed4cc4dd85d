// The exceptions mkc's libraries throw, one per kind of failure, so a front end (the CLI, the JIT
// API's user) can tell the user's mistake from a broken environment from a bug in mkc. The CLI maps
// them to its exit codes: UserError -> 1, EnvironmentError and InternalError -> 2.
// A library never calls exit(); it throws one of these with a message that names the place and the
// fix.
#pragma once

#include <stdexcept>
#include <string>

namespace mkc {

// Exit codes of the command-line tools.
enum ExitCode : int {
  kExitOk = 0,
  kExitUserError = 1,    // bad schedule, bad flag, bad argument
  kExitEnvironment = 2,  // missing driver/GPU/toolkit, failed CUDA or NVRTC call, or an mkc bug
};

// Something the user can fix in their input (schedule, flags, bound tensors).
class UserError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The machine lacks what is needed, or a call into CUDA / NVRTC / verbs failed.
class EnvironmentError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// "Cannot happen": an invariant of mkc itself was broken. Thrown by MKC_CHECK.
class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// Throws InternalError naming the failed condition and the source place.
[[noreturn]] void internal_check_failed(const char* cond, const char* file, int line,
                                        const std::string& msg);

}  // namespace mkc
