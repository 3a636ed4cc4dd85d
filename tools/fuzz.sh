#!/usr/bin/env bash
# Builds mkc's fuzz targets with clang 14 + libFuzzer (ASan and UBSan on) and runs them for SECONDS
# in all (default 60): the .mks parser and checker on raw bytes (half the time; seeded with the
# samples, the golden files and tests/fuzz/corpus: long chains, deep nests, huge loop ranges), the
# structure-aware schedule generator through check, planning and `mkc verify` (a sixth;
# tests/fuzz/mks_gen.h), and a twelfth each for the .npy reader, the device-body scanner, the JIT
# cache's entry format and the tuning database. Exit 0: no crash, leak, hang (5 s per
# input), memory past 2 GB or sanitizer report. A failing input is left in out/fuzz/.
# Usage: tools/fuzz.sh [SECONDS]
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
seconds="${1:-60}"
cxx=$(command -v clang++-14 || command -v clang++ || true)
[[ -n "$cxx" ]] || { echo "fuzz: clang++-14 not found (tools/setup.sh installs it)" >&2; exit 2; }
out=out/fuzz
mkdir -p "$out/corpus"
# The library sources every target links, then each target's own file.
# The generator's target needs the whole compiler (not the JIT): every pass, codegen, the oracle.
srcs=(dsl/*.cc compiler/sema/*.cc compiler/plan/*.cc compiler/kinds/*.cc compiler/oracle/*.cc
  compiler/passes/*.cc compiler/codegen/*.cc compiler/pipeline.cc compiler/verify_schedule.cc
  support/*.cc runtime/npy.cc jit/cache_entry.cc tune/db.cc tune/gemm_model.cc tests/fuzz/mks_gen.cc)
targets=(parse_fuzzer mks_gen_fuzzer npy_fuzzer cpp_body_fuzzer jit_cache_fuzzer tune_db_fuzzer)
echo "fuzz: building ${targets[*]} with $cxx ($(nproc) at once)"
# One object per source, compiled side by side (one clang for all of them took 160 s of CI's
# 2 cores on one), then each target linked with the fuzzer's runtime.
flags=(-std=c++20 -O1 -g -fsanitize=address,undefined -fno-sanitize-recover=undefined
  -DFMT_HEADER_ONLY=1 -I.)
rm -rf "$out/obj" && mkdir -p "$out/obj/lib" "$out/obj/main"
compile_one() {  # source, lib or main
  "$cxx" $FUZZ_FLAGS -fsanitize=fuzzer-no-link -c "$1" -o "$out/obj/$2/$(echo "$1" | tr / _).o"
}
export -f compile_one
export cxx out FUZZ_FLAGS="${flags[*]}"
{
  for src in "${srcs[@]}"; do echo "$src lib"; done
  for t in "${targets[@]}"; do echo "tests/fuzz/$t.cc main"; done
} | xargs -P "$(nproc)" -L 1 bash -c 'compile_one "$@"' _
for t in "${targets[@]}"; do
  [[ -f "$out/obj/main/tests_fuzz_$t.cc.o" ]] || { echo "fuzz: $t did not compile" >&2; exit 2; }
  "$cxx" "${flags[@]}" -fsanitize=fuzzer "$out/obj/main/tests_fuzz_$t.cc.o" "$out"/obj/lib/*.o \
    -o "$out/$t"
done
mkdir -p "$out/corpus/parse" "$out/corpus/mks_gen" "$out/corpus/npy" "$out/corpus/cpp_body" "$out/corpus/jit_cache" \
  "$out/corpus/tune_db"
cp samples/*.mks tests/dsl/golden/*.mks tests/fuzz/corpus/*.mks "$out/corpus/parse/"
# Seeds: a .npy file as mkc writes it (a header and six floats), and the samples' device bodies.
printf '\x93NUMPY\x01\x00\x76\x00{'"'"'descr'"'"': '"'"'<f4'"'"', '"'"'fortran_order'"'"': False, '"'"'shape'"'"': (2, 3), }%*s\n' 58 '' > "$out/corpus/npy/f4.npy"
head -c 24 /dev/zero >> "$out/corpus/npy/f4.npy"
grep -h -A3 'device ' samples/*.mks tests/dsl/golden/*.mks | sed -n 's/.*{//p' > "$out/corpus/cpp_body/bodies.txt" || true
# A JIT cache entry (header, checksum, a cubin naming the kernel) and a tuning database.
printf 'MKCC2 0123456789abcdef0123456789abcdef mkc_fuzz\n10 0 0 1 2 3 4 0\n\0mkc_fuzz\0' > "$out/corpus/jit_cache/entry"
cat > "$out/corpus/tune_db/db.json" <<'JSON'
{"format": "mkc-tune-db", "version": 1, "entries": {"0000000000000000/gemm/M=16/R1/L0/sm_90a/sms0/nvrtc0": {"key": {"schedule_hash": "0000000000000000", "schedule": "gemm", "defines": {"M": 16}, "ranks": 1, "ranks_per_node": 0, "arch": "sm_90a", "sms": 0, "nvrtc": 0}, "ops": {"mm": {"tile": [64, 128, 64], "split_k": 2, "us": 3.5}}, "us": 3.5, "tuned_at": "2026-12-05T00:00:00Z"}}}
JSON
# The parser gets half the time, the generator a sixth, the others a twelfth each.
parse_s=$((seconds / 2)); gen_s=$((seconds / 6)); ((gen_s > 0)) || gen_s=1
rest_s=$(((seconds - parse_s - gen_s) / 4)); ((rest_s > 0)) || rest_s=1
cd "$out"
run() {  # target, seconds, corpus, extra flags
  echo "fuzz: running $1 for $2 s"
  ASAN_OPTIONS=detect_leaks=1 "./$1" -max_total_time="$2" -timeout=5 -rss_limit_mb=2048 \
    -print_final_stats=1 "${@:4}" "corpus/$3" 2>&1 | tail -15
  return "${PIPESTATUS[0]}"
}
run parse_fuzzer "$parse_s" parse -max_len=65536 -dict=../../tests/fuzz/mks.dict
run mks_gen_fuzzer "$gen_s" mks_gen -max_len=512
run npy_fuzzer "$rest_s" npy -max_len=4096
run cpp_body_fuzzer "$rest_s" cpp_body -max_len=4096
run jit_cache_fuzzer "$rest_s" jit_cache -max_len=4096
run tune_db_fuzzer "$rest_s" tune_db -max_len=4096
echo "fuzz: ok, no crash in ${seconds}s"
