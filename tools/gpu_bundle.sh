#!/usr/bin/env bash
# Builds the binaries a GPU machine without Bazel needs and copies them to a git-ignored folder
# (default .device/bin) that the device tool carries. Run there: .device/bin/run_gpu_tests.sh.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dest="${1:-.device/bin}"
tests=$(bazel query 'attr(tags, "\bgpu\b", tests(//...))' 2>/dev/null)
# Optimised: the tests' host references run over up to 256 MB per rank.
bazel build -c opt $tests
rm -rf "$dest" && mkdir -p "$dest"
for t in $tests; do
  pkg=${t#//}; pkg=${pkg%%:*}; name=${t##*:}
  cp "bazel-bin/$pkg/$name" "$dest/"
done
# mkc itself optimised: `mkc run --check` computes its reference on the CPU.
# job_probe: one rank of multiprocess_test's jobs; fn_eval: device functions on the GPU, for a
# comparison with the CPU's evaluator here (tools/fn_eval/main.cc).
bazel build -c opt //:mkc //bench:gemm_bench //bench:allreduce_bench //bench:gemm_allreduce_bench \
  //bench:proxy_bench //bench:proxy_gpu_bench \
  //samples/host:gemm_allreduce //tools/mkrun //tests/runtime:job_probe //runtime:libmkc.so \
  //tools/fn_eval
cp bazel-bin/mkc bazel-bin/bench/gemm_bench bazel-bin/bench/allreduce_bench \
  bazel-bin/bench/gemm_allreduce_bench bazel-bin/bench/proxy_bench bazel-bin/bench/proxy_gpu_bench \
  bazel-bin/samples/host/gemm_allreduce bazel-bin/tools/mkrun/mkrun bazel-bin/tests/runtime/job_probe \
  bazel-bin/runtime/libmkc.so bazel-bin/tools/fn_eval/fn_eval "$dest/"
# Tests open samples/*.mks relative to where they run.
cp -r samples "$dest/samples"
cp tools/gpu_acceptance.sh tools/gpu_tables_ab.sh tools/gpu_attention_ab.sh tools/trace_summary.py tools/ncu_lines.py \
  tools/sass_loops.py "$dest/"
mkdir -p "$dest/bench" && cp bench/*.mks bench/*.py "$dest/bench/"
cat > "$dest/run_gpu_tests.sh" <<'RUN'
#!/usr/bin/env bash
# Runs every GPU test binary in this folder; prints doctest's summary for each.
cd "$(dirname "$0")"
rc=0
for t in *_test; do
  echo "== $t"
  ./"$t" --duration=true || rc=1
done
exit $rc
RUN
chmod +x "$dest/run_gpu_tests.sh"
chmod -R u+w "$dest"
echo "gpu_bundle: $(ls "$dest" | wc -l) files in $dest"
