#!/usr/bin/env bash
# The runtime issue's acceptance run on this machine's GPUs (2 for issue 5, 4 or 8 for issue 7),
# from the bundle of tools/gpu_bundle.sh, in one call:
#   cd .device/bin && ./gpu_acceptance.sh [--quick] [--ranks N] [--only STEP[,STEP...]]
# --ranks N: N processes in the mkrun step (default: one per GPU); more than the GPUs share them
# (--share-gpus: checks the protocol across processes, not NVLink speed).
# --only: the steps to run, of tests, sweep, mkrun, bench (default all). The whole run outlasts
# one device call (600 s; on one H200 the GPU tests took ~5 min, the 256 MB sweep over 6 min):
# run it as parts, e.g. --only tests, then --only sweep, then --only mkrun,bench.
# Steps: the GPU tests; the collectives' bitwise sweep to 256 MB (4 MB with --quick); every
# collective sample and GEMM+AllReduce as one process per GPU under mkrun, checked, then 1,000
# launches; the all-reduce benchmark against NCCL; GEMM+AllReduce against cuBLAS then NCCL; the
# GEMM benchmark against cuBLAS. Each step
# prints its outcome lines; the last line counts the steps that failed.
set -u
cd "$(dirname "$0")"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
quick=0
only=tests,sweep,mkrun,bench
gpus=$(nvidia-smi -L | wc -l)
procs=$gpus
while [[ $# -gt 0 ]]; do
  case "$1" in
    --quick) quick=1 ;;
    --ranks) procs=$2; shift ;;
    --only) only=$2; shift ;;
    *) echo "gpu_acceptance: unknown argument $1 (--quick, --ranks N, --only STEPS)" >&2; exit 2 ;;
  esac
  shift
done
share=()
((procs > gpus)) && share=(--share-gpus)
failed=0
step() { echo; echo "== $* ($(date -u +%H:%M:%S))"; }
want() { [[ ",$only," == *",$1,"* ]]; }
check() { if [[ $1 -ne 0 ]]; then failed=$((failed + 1)); echo "-> FAILED (exit $1)"; fi; }

date -u
nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
nvidia-smi topo -m

if want tests; then
  step "GPU tests"
  ./run_gpu_tests.sh 2>&1 | grep -E "^== |^\[doctest\] (test cases|assertions)|ERROR|FATAL"
  check "${PIPESTATUS[0]}"
fi

if want sweep; then
  step "collectives, bf16 and f32, bitwise against the reference, 2 ranks"
  # stderr carries a line per size as it starts: a cut-off run still shows how far it got.
  MKC_SWEEP_MAX_MB=$((quick ? 4 : 256)) timeout 900 ./local_job_test -tc="collectives?*" 2>&1 |
    grep -E "^sweep:|^\[doctest\] (test cases|assertions)|ERROR|FATAL"
  check "${PIPESTATUS[0]}"
fi

if want mkrun; then
  step "$procs processes on $gpus GPU(s), mkrun: checked, then 1,000 launches"
  for job in "allreduce -D N=4194304" "allgather -D M=8192 -D K=1024" \
    "reducescatter -D M=8192 -D N=1024" "alltoall -D T=1024 -D H=1024 -D K=2" \
    "gemm_allreduce -D M=1024 -D N=1024 -D K=1024"; do
    set -- $job
    name=$1
    shift
    timeout 300 ./mkrun -n "$procs" ./mkc run "samples/$name.mks" "$@" "${share[@]}" --check \
      --iters 1000 2>&1 |
      grep -E "^check|^time|error|FAILED" | sed "s/^/$name: /"
    check "${PIPESTATUS[0]}"
  done
fi

if want bench; then
  step "all-reduce against NCCL (CUDA graph), same process"
  timeout 900 ./allreduce_bench 2>&1 | tail -8
  check "${PIPESTATUS[0]}"

  step "GEMM+AllReduce against cuBLAS then NCCL (CUDA graph), same process"
  timeout 900 ./gemm_allreduce_bench 2>&1 | tail -6
  check "${PIPESTATUS[0]}"

  step "GEMM against cuBLAS, same process"
  timeout 600 ./gemm_bench --iters 10 --rounds 3 2>&1 | tail -8
  check "${PIPESTATUS[0]}"
fi

echo
echo "gpu_acceptance: $failed step(s) failed"
exit $((failed > 0))
