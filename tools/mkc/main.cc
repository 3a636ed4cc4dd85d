// Entry point of the `mkc` binary: everything lives in cli.cc.
#include <unistd.h>

#include <iostream>

#include "tools/mkc/cli.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  mkc::cli::Terminal term;
  term.err_is_tty = isatty(STDERR_FILENO) != 0;
  term.process_exits = true;
  return mkc::cli::run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr, term);
}
