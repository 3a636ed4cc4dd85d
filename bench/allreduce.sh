#!/usr/bin/env bash
# All-reduce benchmark, mkc against NCCL in the same run, on this machine's GPUs (2 or more).
#   mkc:  `mkc run bench/allreduce.mks -D N=... --iters 200`: mean time per launch of the
#         generated persistent kernel, back to back on every GPU (kernel launch included).
#   NCCL: bench/nccl_allreduce.py under torchrun, one all-reduce inside a CUDA graph (median).
# Prints a table: size, mkc us, NCCL us, NCCL/mkc (above 1: mkc faster).
# Usage: bench/allreduce.sh [MKC_BINARY]   (default bazel-bin/mkc)
set -euo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkc="${1:-bazel-bin/mkc}"
sizes=(8192 65536 524288 4194304 33554432 268435456)
gpus=$(nvidia-smi -L | wc -l)
declare -A mkc_us nccl_us
for b in "${sizes[@]}"; do
  line=$("$mkc" run bench/allreduce.mks -D N=$((b / 2)) --iters 200 | grep '^time:' || true)
  mkc_us[$b]=$(echo "$line" | awk '{print $2}')
  echo "mkc $b ${mkc_us[$b]:-failed}" >&2
done
python3=$(command -v python3)
while read -r tag b us; do
  [[ "$tag" == nccl ]] && nccl_us[$b]=$us
done < <("$python3" -m torch.distributed.run --standalone --nproc_per_node="$gpus" bench/nccl_allreduce.py "${sizes[@]}" 2>/dev/null)
printf "%12s %12s %12s %14s\n" "bytes/rank" "mkc us" "NCCL us" "NCCL/mkc"
for b in "${sizes[@]}"; do
  m=${mkc_us[$b]:-nan}
  n=${nccl_us[$b]:-nan}
  printf "%12s %12s %12s %14s\n" "$b" "$m" "$n" "$(awk -v m="$m" -v n="$n" 'BEGIN { if (m > 0 && n > 0) printf "%.3f", n / m; else print "n/a" }')"
done
