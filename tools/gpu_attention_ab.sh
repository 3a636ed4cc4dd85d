#!/usr/bin/env bash
# Two builds of the attention tile against each other and cuDNN, in one device call: each build's
# libmkc.so and mkc (a folder holding both, e.g. the bundle of tools/gpu_bundle.sh and a copy of
# an older one), alternating over --rounds rounds so that both meet the same GPU state, each
# through bench/attention_bench.py on the same shapes and schedule; then the SASS of each build's
# kernel at one shape, summed up by sass_loops.py (instructions, R2UR, wgmma waits against exps).
#   cd .device/bin && ./gpu_attention_ab.sh OLD_DIR NEW_DIR [--shapes BxHxSxDxCAUSAL,...]
#       [--rounds N] [--schedule FILE] [--sass-shape BxHxSxDxCAUSAL]
# The schedule defaults to bench/attention.mks (the compiler's own tile); to compare two tiles of
# one build, run it once per schedule. Keep rounds x shapes within the device's 10 minutes a call.
# Exit status: the number of bench runs and SASS dumps that failed (0: all ran).
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
usage="(OLD_DIR NEW_DIR, --shapes, --rounds N, --schedule FILE, --sass-shape BxHxSxDxCAUSAL; see --help)"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --shapes|--rounds|--schedule|--sass-shape)
      if [[ $# -lt 2 ]]; then echo "gpu_attention_ab: $1 needs a value $usage" >&2; exit 2; fi
      case "$1" in
        --shapes) shapes=$2 ;;
        --rounds) rounds=$2 ;;
        --schedule) schedule=$2 ;;
        --sass-shape) sass_shape=$2 ;;
      esac
      shift ;;
    -h|--help) sed -n 2,11p "$self"; exit 0 ;;
    -*) echo "gpu_attention_ab: unknown option $1 $usage" >&2; exit 2 ;;
    *) dirs+=("$1") ;;
  esac
  shift
done
if [[ ${#dirs[@]} -ne 2 ]]; then
  echo "gpu_attention_ab: give two build folders (OLD_DIR NEW_DIR), each with libmkc.so and mkc $usage" >&2
  exit 2
fi
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "gpu_attention_ab: --rounds $rounds is not a count $usage" >&2; exit 2; }
[[ $sass_shape =~ ^[0-9]+x[0-9]+x[0-9]+x[0-9]+x[01]$ ]] ||
  { echo "gpu_attention_ab: --sass-shape $sass_shape is not BxHxSxDxCAUSAL $usage" >&2; exit 2; }
for d in "${dirs[@]}"; do
  for f in libmkc.so mkc; do
    [[ -f "$d/$f" ]] || { echo "gpu_attention_ab: $d/$f: no such file" >&2; exit 2; }
  done
done
[[ -f "$schedule" ]] || { echo "gpu_attention_ab: $schedule: no such schedule" >&2; exit 2; }
out="${OUT:-/tmp}/attention_ab"
mkdir -p "$out"
failed=0
names=(a b)  # the two builds' files under $out, whatever their folders are called
for ((r = 1; r <= rounds; r++)); do
  for i in 0 1; do
    d=${dirs[$i]}
    log="$out/${names[$i]}_round$r.log"
    echo "== round $r: ${names[$i]} = $d"
    timeout 280 python3 bench/attention_bench.py --lib "$d/libmkc.so" --schedule "$schedule" \
      --iters 5 --reps 3 --ring-shapes '' --causal-ring-shapes '' --shapes "$shapes" >"$log" 2>&1
    rc=$?
    grep -E "^ +[0-9]|geometric" "$log"
    if [[ $rc -ne 0 ]]; then
      echo "   bench exit $rc (124: over 280 s); the end of $log:"
      tail -5 "$log" | sed 's/^/   /'
      failed=$((failed + 1))
    fi
  done
done
IFS=x read -r b h s dh c <<<"$sass_shape"
for i in 0 1; do
  d=${dirs[$i]}
  name=${names[$i]}
  rm -rf "${out:?}/$name" && mkdir -p "$out/$name"
  if "$d/mkc" compile "$schedule" --ranks 1 -D B="$b" -D H="$h" -D S="$s" -D D="$dh" \
      -D MASK=$((c + 1)) --emit cubin -o "$out/$name" >"$out/$name.compile.log" 2>&1 &&
      cuobjdump -sass "$out/$name"/*.cubin >"$out/$name.sass" 2>>"$out/$name.compile.log"; then
    echo "== SASS of $name = $d at $sass_shape ($out/$name.sass):"
    python3 sass_loops.py "$out/$name.sass"
  else
    echo "== SASS of $name = $d: compile or cuobjdump failed; the end of $out/$name.compile.log:"
    tail -5 "$out/$name.compile.log" | sed 's/^/   /'
    failed=$((failed + 1))
  fi
done
exit "$failed"
