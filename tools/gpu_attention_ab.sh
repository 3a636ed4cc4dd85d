#!/usr/bin/env bash
# Two builds of the attention tile against each other and cuDNN, in one device call: each build's
# libmkc.so and mkc (a folder holding both, e.g. the bundle of tools/gpu_bundle.sh and a copy of
# an older one), alternating over --rounds rounds so that both meet the same GPU state, each
# through bench/attention_bench.py on the same shapes; then the SASS of each build's kernel at one
# shape, summed up by sass_loops.py (instructions, R2UR, wgmma waits against the exps).
#   cd .device/bin && ./gpu_attention_ab.sh OLD_DIR NEW_DIR [--shapes B x H x S x D x CAUSAL,...]
#       [--rounds N] [--schedule FILE] [--sass-shape BxHxSxDxCAUSAL]
# The schedule defaults to bench/attention.mks (the compiler's own tile); pass another (e.g. one
# with tile(128)) to compare tiles within one build: OLD_DIR and NEW_DIR may then be the same.
# Environment kept as the device needs it (NVLink multicast off); MKC_CACHE_DIR is shared.
set -u
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")" || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MKC_CACHE_DIR="${MKC_CACHE_DIR:-/tmp/mkc_cache}"
shapes=16x16x2048x64x0,2x32x8192x64x0,1x32x16384x64x0,4x32x4096x64x1,16x16x2048x64x1,16x16x2048x128x0,1x32x4096x128x1
rounds=2
schedule=bench/attention.mks
sass_shape=2x32x8192x64x0
dirs=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes) shapes=$2; shift ;;
    --rounds) rounds=$2; shift ;;
    --schedule) schedule=$2; shift ;;
    --sass-shape) sass_shape=$2; shift ;;
    -h|--help) sed -n 2,11p "$self"; exit 0 ;;
    -*) echo "gpu_attention_ab: unknown option $1 (--shapes, --rounds, --schedule, --sass-shape)" >&2; exit 2 ;;
    *) dirs+=("$1") ;;
  esac
  shift
done
if [[ ${#dirs[@]} -ne 2 ]]; then
  echo "gpu_attention_ab: give two build folders (OLD_DIR NEW_DIR), each with libmkc.so and mkc; see --help" >&2
  exit 2
fi
for d in "${dirs[@]}"; do
  for f in libmkc.so mkc; do
    [[ -f "$d/$f" ]] || { echo "gpu_attention_ab: $d/$f: no such file" >&2; exit 2; }
  done
done
[[ -f "$schedule" ]] || { echo "gpu_attention_ab: $schedule: no such schedule" >&2; exit 2; }
for ((r = 1; r <= rounds; r++)); do
  for d in "${dirs[@]}"; do
    echo "== round $r: $d"
    timeout 300 python3 bench/attention_bench.py --lib "$d/libmkc.so" --schedule "$schedule" \
      --iters 5 --reps 3 --ring-shapes '' --causal-ring-shapes '' --shapes "$shapes" 2>&1 |
      grep -E "^ +[0-9]|geometric|rror"
  done
done
IFS=x read -r b h s dh c <<<"$sass_shape"
out="${OUT:-/tmp}/attention_ab"
mkdir -p "$out"
for d in "${dirs[@]}"; do
  name=$(basename "$(cd "$d" && pwd)")
  rm -rf "$out/$name" && mkdir -p "$out/$name"
  if "$d/mkc" compile "$schedule" --ranks 1 -D B="$b" -D H="$h" -D S="$s" -D D="$dh" \
      -D MASK=$((c + 1)) --emit cubin -o "$out/$name" >/dev/null 2>&1 &&
      cuobjdump -sass "$out/$name"/*.cubin >"$out/$name.sass" 2>&1; then
    echo "== SASS of $d at $sass_shape ($out/$name.sass):"
    python3 sass_loops.py "$out/$name.sass"
  else
    echo "== SASS of $d: compile or cuobjdump failed"
  fi
done
