#!/usr/bin/env bash
# The README's main job: set up the machine, build mkc, and show it working: print the version,
# and on a machine with a GPU list the devices. (As the compiler grows this compiles a sample
# schedule, and on a GPU machine runs it.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
bazel build //:mkc
bazel-bin/mkc --version
if bazel-bin/mkc devices 2>/tmp/mkc_devices.err; then
  :
else
  echo "(no GPU here: $(head -c 120 /tmp/mkc_devices.err)...)"
fi
