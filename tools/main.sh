#!/usr/bin/env bash
# The README's main job: set up the machine, build mkc, print its version, check every sample
# schedule, and on a machine with a GPU list the devices. (Compiling a sample to a kernel and running
# it on the GPUs come with the compiler and runtime issues.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
bazel build //:mkc
bazel-bin/mkc --version
bazel-bin/mkc check samples/*.mks
if bazel-bin/mkc devices 2>/tmp/mkc_devices.err; then
  :
else
  echo "(no GPU here: $(head -c 120 /tmp/mkc_devices.err)...)"
fi
