#!/usr/bin/env bash
# Builds the .mks parser/checker fuzz target with clang 14 + libFuzzer (ASan and UBSan on) and runs
# it for SECONDS (default 60), seeded with the samples, the golden files and tests/fuzz/corpus (the
# extreme inputs: long chains, deep nests, huge loop ranges). Exit 0: no crash, leak, hang (5 s
# per input) or sanitizer report. A failing input is left in out/fuzz/.
# Usage: tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-60}"
cxx=$(command -v clang++-14 || command -v clang++ || true)
[[ -n "$cxx" ]] || { echo "fuzz: clang++-14 not found (tools/setup.sh installs it)" >&2; exit 2; }
out=out/fuzz
mkdir -p "$out/corpus"
srcs=(tests/fuzz/parse_fuzzer.cc dsl/*.cc compiler/sema/check*.cc compiler/sema/device_code.cc compiler/sema/expr_eval.cc compiler/sema/program.cc support/error.cc)
echo "fuzz: building with $cxx ($(nproc) at once)"
# One object per source, compiled side by side (one clang for all of them took 160 s of CI's
# 2 cores on one), then linked with the fuzzer's runtime.
flags=(-std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined
  -DFMT_HEADER_ONLY=1 -I.)
rm -rf "$out/obj" && mkdir -p "$out/obj"
printf '%s\n' "${srcs[@]}" | xargs -P "$(nproc)" -I{} \
  sh -c 'exec "$0" "$@" -fsanitize=fuzzer-no-link -c "{}" -o "'"$out"'/obj/$(echo "{}" | tr / _).o"' \
  "$cxx" "${flags[@]}"
"$cxx" "${flags[@]}" -fsanitize=fuzzer "$out"/obj/*.o -o "$out/parse_fuzzer"
cp samples/*.mks tests/dsl/golden/*.mks tests/fuzz/corpus/*.mks "$out/corpus/"
echo "fuzz: running for ${seconds}s"
cd "$out"
ASAN_OPTIONS=detect_leaks=1 ./parse_fuzzer -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
  -max_len=65536 -dict=../../tests/fuzz/mks.dict -print_final_stats=1 corpus 2>&1 | tail -15
echo "fuzz: ok, no crash in ${seconds}s"
