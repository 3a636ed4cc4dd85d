// Entry point of the `mkc` binary: everything lives in cli.cc.
#include <iostream>

#include "tools/mkc/cli.h"

int main(int argc, char** argv) {
  std::ios::sync_with_stdio(false);
  return mkc::cli::run(std::vector<std::string>(argv + 1, argv + argc), std::cout, std::cerr);
}
