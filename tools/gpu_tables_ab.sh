#!/usr/bin/env bash
# The plan's tables as data (the default since 2026-12-05) against the constant tables
# (docs/COMPILER.md, "The plan's tables"), from the bundle of tools/gpu_bundle.sh, in one device
# call:
#   cd .device/bin && ./gpu_tables_ab.sh [--only tests|runs] [--budget-s S] [--jobs N]
# tests: every GPU test binary with MKC_TABLES=data, all at once (each under the budget), then
#        doctest's summary line of each.
# runs:  every sample checked (`mkc run --check`) at R 1, 2 and 3 sharing the GPU and across two
#        emulated nodes (R 4, 2 per node) with MKC_TABLES=data; then, for a few samples, the time
#        per launch with the constant tables and with the data tables, one after the other on the
#        same GPU, and their ratio (data / source: above 1 is slower).
# The last line counts what failed.
set -u
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")" || exit 2
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export MKC_CACHE_DIR="${MKC_CACHE_DIR:-/tmp/mkc_cache}"
only=tests,runs
budget=420
jobs=4
while [[ $# -gt 0 ]]; do
  case "$1" in
    --only) only=$2; shift ;;
    --budget-s) budget=$2; shift ;;
    --jobs) jobs=$2; shift ;;
    -h|--help) sed -n 2,12p "$self"; exit 0 ;;
    *) echo "gpu_tables_ab: unknown argument $1 (--only tests|runs, --budget-s S, --jobs N)" >&2; exit 2 ;;
  esac
  shift
done
failed=0
out="${OUT:-/tmp}/tables_ab"
mkdir -p "$out"
: >"$out/check_failures"

if [[ ,$only, == *,tests,* ]]; then
  for t in *_test; do
    MKC_TABLES=data timeout "$budget" ./"$t" --duration=true >"$out/$t.log" 2>&1 &
  done
  wait
  for t in *_test; do
    line=$(grep -a "test cases:" "$out/$t.log" | tail -1)
    echo "tests (data tables) $t: ${line:-no summary (see $out/$t.log)}"
    grep -aq "| 0 failed" <<<"$line" || failed=$((failed + 1))
  done
fi

if [[ ,$only, == *,runs,* ]]; then
  small() {  # the sample's small shape as -D flags
    python3 -c "import json,sys; s=json.load(open('samples/small_shapes.json'))['shapes'].get(sys.argv[1], {}); print(' '.join(f'-D {k}={v}' for k, v in s.items()))" "$1"
  }
  check_one() {  # sample, world ("4 --ranks-per-node 2"): prints a line only when it fails
    local f=$1 world=$2 name log
    name=$(basename "$f" .mks)
    log="$out/check_${name}_${world%% *}.log"
    # shellcheck disable=SC2046,SC2086
    if ! MKC_TABLES=data timeout 240 ./mkc run --check --share-gpus --ranks $world $(small "$name") \
      "$f" >"$log" 2>&1; then
      # A world size the small shape does not divide is refused before anything runs.
      grep -aq "inexact-division\|does not divide" "$log" && return 0
      echo "check (data tables) $name R $world: FAILED: $(tail -2 "$log" | tr '\n' ' ')"
    fi
  }
  # The checks run $jobs at a time: most of each is NVRTC and the CPU reference.
  running=0
  for f in samples/*.mks; do
    for world in "1" "2" "3" "4 --ranks-per-node 2"; do
      check_one "$f" "$world" >>"$out/check_failures" &
      running=$((running + 1))
      if ((running >= jobs)); then wait -n; running=$((running - 1)); fi
    done
  done
  wait
  if [[ -s "$out/check_failures" ]]; then
    cat "$out/check_failures"
    failed=$((failed + $(wc -l <"$out/check_failures")))
  fi
  echo "checks (data tables): done, $failed failed so far"
  for spec in "gemm.mks 1" "gemm_allreduce.mks 2" "moe_ffn_combine.mks 2" "ring_attention.mks 2"; do
    # shellcheck disable=SC2086
    set -- $spec
    times() {
      MKC_TABLES=$1 timeout 120 ./mkc run --iters 50 --share-gpus --ranks "$2" "samples/$3" 2>&1 |
        sed -n 's/^time: \([0-9.]*\) us per launch.*/\1/p'
    }
    us_source=$(times source "$2" "$1")
    us_data=$(times data "$2" "$1")
    us_source=${us_source:-nan}
    us_data=${us_data:-nan}
    echo "$1 at R $2: source tables ${us_source} us, data tables ${us_data} us per launch," \
      "data / source $(python3 -c "import sys; a,b=sys.argv[1:]; print('%.3f' % (float(b)/float(a)) if 'nan' not in (a,b) else 'n/a')" "$us_source" "$us_data")"
  done
fi
echo "gpu_tables_ab: $failed failed"
exit $((failed > 0))
