#!/usr/bin/env python3
"""Snapshots what `mkc compile --emit cu,plan` writes for every sample, so that a restructuring of
the compiler can be shown to change nothing, byte for byte.

  tools/compile_snapshot.py --mkc bazel-bin/mkc --out /tmp/before     # on the old code
  tools/compile_snapshot.py --mkc bazel-bin/mkc --out /tmp/after      # on the new code
  tools/compile_snapshot.py --compare /tmp/before /tmp/after          # exit 1 on any difference

Cases: every sample at its defaults and at two other shapes (small, and ragged where the sample
allows it), at 1 and 4 ranks, and at 4 ranks on 2 emulated nodes (--ranks-per-node 2). A case the
compiler refuses is snapshotted too: its exit status and message must not change either.
"""
import argparse
import concurrent.futures
import filecmp
import os
import subprocess
import sys
import time

# Two shapes besides the defaults, per sample: small, and ragged (sizes that are no tile multiple).
SHAPES = {
    "allgather": [{"M": 256, "K": 64}, {"M": 1000, "K": 520}],
    "allgather_gemm": [{"M": 256, "N": 256, "K": 128}, {"M": 1000, "N": 3000, "K": 520}],
    "allreduce": [{"N": 4096}, {"N": 100004}],
    "alltoall": [{"T": 37, "H": 64, "K": 1}, {"T": 100, "H": 256, "K": 2}],
    "gemm": [{"M": 16, "N": 8192, "K": 7168}, {"M": 3000, "N": 5000, "K": 4000}],
    "gemm_allreduce": [{"M": 256, "N": 1024, "K": 512}, {"M": 1000, "N": 3000, "K": 520}],
    "gemm_reducescatter": [{"M": 256, "N": 1024, "K": 512}, {"M": 1000, "N": 3000, "K": 520}],
    "moe_dispatch_gemm": [
        {"T": 37, "H": 512, "F": 256, "E": 16, "TOPK": 4},
        {"T": 100, "H": 256, "F": 128, "E": 8, "TOPK": 2},
    ],
    "moe_ffn_combine": [
        {"T": 37, "H": 512, "F": 256, "E": 16, "TOPK": 4},
        {"T": 100, "H": 256, "F": 128, "E": 8, "TOPK": 2},
    ],
    "reducescatter": [{"M": 256, "N": 64}, {"M": 1000, "N": 520}],
    "ring_attention": [{"B": 2, "H": 4, "S": 2048, "D": 64}, {"B": 1, "H": 2, "S": 1000, "D": 128}],
    "ring_attention_causal": [
        {"B": 2, "H": 4, "S": 2048, "D": 64},
        {"B": 1, "H": 2, "S": 1024, "D": 128},
    ],
}


def cases(samples_dir):
    out = []
    for name in sorted(SHAPES):
        path = os.path.join(samples_dir, name + ".mks")
        if not os.path.exists(path):
            sys.exit(f"compile_snapshot: {path} not found (a sample was renamed: update SHAPES)")
        shapes = [("defaults", {})] + [(f"shape{i + 1}", s) for i, s in enumerate(SHAPES[name])]
        for label, params in shapes:
            for ranks in (1, 4):
                out.append((f"{name}__{label}__r{ranks}", path, params, ranks, 0))
        out.append((f"{name}__shape1__r4_nodes2", path, SHAPES[name][0], 4, 2))
    return out


ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def run_case(mkc, out_dir, case, timeout):
    key, path, params, ranks, per_node = case
    # Relative to the repository (mkc runs there): the generated banner names the file, and
    # snapshots of two checkouts must compare.
    path = os.path.relpath(os.path.abspath(path), ROOT)
    dest = os.path.abspath(os.path.join(out_dir, key))
    os.makedirs(dest, exist_ok=True)
    args = [path, "--ranks", str(ranks), "--emit", "cu,plan"]
    if per_node:
        args += ["--ranks-per-node", str(per_node)]
    for k, v in params.items():
        args += ["-D", f"{k}={v}"]
    cmd = [mkc, "compile"] + args + ["-o", os.path.join(dest, "out")]
    start = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        rc, err = p.returncode, p.stderr
    except subprocess.TimeoutExpired:
        rc, err = "timeout", ""
    # The exit status and, for a refusal, the message (a success's summary has timings in it).
    with open(os.path.join(dest, "status.txt"), "w") as f:
        f.write(f"compile {' '.join(args)}\nexit {rc}\n")
        if rc != 0:
            f.write(err)
    return key, rc, time.time() - start


def compare(a, b):
    differ = []

    def walk(cmp, rel):
        for name in cmp.left_only + cmp.right_only:
            differ.append(os.path.join(rel, name) + " (only in one)")
        for name in cmp.diff_files + cmp.funny_files:
            differ.append(os.path.join(rel, name))
        for name, sub in cmp.subdirs.items():
            walk(sub, os.path.join(rel, name))

    walk(filecmp.dircmp(a, b, ignore=[]), "")
    # dircmp compares by os.stat signature first: confirm byte for byte.
    files = 0
    for root, _, names in os.walk(a):
        for n in names:
            pa = os.path.join(root, n)
            pb = os.path.join(b, os.path.relpath(pa, a))
            if os.path.exists(pb):
                files += 1
                if not filecmp.cmp(pa, pb, shallow=False):
                    rel = os.path.relpath(pa, a)
                    if rel not in differ:
                        differ.append(rel)
    for d in sorted(differ):
        print("DIFFERS:", d)
    print(f"{files} files compared, {len(differ)} differ")
    return 1 if differ else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mkc", help="the mkc binary")
    ap.add_argument("--out", help="a new folder for the snapshot")
    ap.add_argument("--samples", default=os.path.join(os.path.dirname(__file__), "..", "samples"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per compile")
    ap.add_argument("--only", help="samples whose name contains this")
    ap.add_argument("--compare", nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args()
    if a.compare:
        return compare(*a.compare)
    if not a.mkc or not a.out:
        ap.error("--mkc and --out are required (or --compare BEFORE AFTER)")
    todo = [c for c in cases(a.samples) if not a.only or a.only in c[0]]
    os.makedirs(a.out, exist_ok=True)
    start = time.time()
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        futures = [pool.submit(run_case, os.path.abspath(a.mkc), a.out, c, a.timeout) for c in todo]
        for i, f in enumerate(concurrent.futures.as_completed(futures)):
            key, rc, secs = f.result()
            print(f"[{i + 1}/{len(todo)}] {key}: exit {rc}, {secs:.1f} s", flush=True)
    print(f"{len(todo)} cases in {time.time() - start:.0f} s -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
