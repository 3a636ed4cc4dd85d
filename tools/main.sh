#!/usr/bin/env bash
# The README's main job: set up the machine, build mkc, check every sample schedule, compile
# GEMM+AllReduce to a kernel (NVRTC, no GPU needed) and, on a machine with GPUs, run it on every
# GPU and check its outputs against the reference.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tools/setup.sh
bazel build //:mkc
bazel-bin/mkc --version
bazel-bin/mkc check samples/*.mks
bazel-bin/mkc compile samples/gemm_allreduce.mks -D M=1024 -o out/main --emit cu,cubin,plan
if bazel-bin/mkc devices 2>/tmp/mkc_devices.err; then
  # Small shapes: --check computes the reference on the CPU in double precision.
  bazel-bin/mkc run samples/gemm_allreduce.mks -D M=256 -D N=1024 -D K=512 --check --iters 20
else
  echo "(no GPU here, so nothing runs: $(head -c 100 /tmp/mkc_devices.err)...)"
fi
