#!/usr/bin/env python3
"""Issue 36's sweep in one command: every case, the library against mkc, each ratio, the minimum and
the geometric mean.

    python3 bench/sweep.py --bin .device/bin [--tune 3] [--out DIR] [--only gemm,gemm_allreduce,moe]
    python3 bench/sweep.py --dry-run            # the commands, nothing run (no GPU needed)
    python3 bench/sweep.py --summarize DIR      # the summary of CSVs an earlier run left in DIR

Each family runs in its own process, mkc and the library on the same data in that process:
  gemm            gemm_bench --sweep --tune N: 33 GEMM shapes, cuBLAS against mkc's own pick and
                  mkc tuned over the model's next N (gemm.csv);
  gemm_allreduce  gemm_allreduce_bench --ranks 1 at M 16, 128, 1024, 4096 (N 8192, K 7168): the
                  fused kernel against the GEMM alone (the target: within 3%) (gemm_allreduce.csv);
  moe             bench/moe_bench.py at the issue's four models, T 128, 1024 and 4096, dispatch+FC1
                  and dispatch+FFN+combine against torch._grouped_mm and the PyTorch FFN given
                  mkc's group sizes (moe_<experts>_<topk>.csv).
Ratios are library time / mkc time (above 1: mkc faster); for gemm_allreduce, GEMM alone / fused.
Exit status: 0 when every family ran and wrote its table, 1 otherwise (what failed is printed).
"""
import argparse
import csv
import glob
import math
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# (experts, top-k, hidden, FFN) of the four models: DeepSeek-V3, then three kept aside.
MODELS = [(256, 8, 7168, 2048), (128, 8, 2048, 768), (8, 2, 6144, 16384), (16, 1, 5120, 8192)]
FAMILIES = ("gemm", "gemm_allreduce", "moe")


def commands(args):
    """[(family, csv name, argv)] for the families asked for."""
    out = []
    if "gemm" in args.only:
        out.append(("gemm", "gemm.csv",
                    [os.path.join(args.bin, "gemm_bench"), "--sweep", "--tune", str(args.tune),
                     "--iters", str(args.iters), "--rounds", "3"]))
    if "gemm_allreduce" in args.only:
        out.append(("gemm_allreduce", "gemm_allreduce.csv",
                    [os.path.join(args.bin, "gemm_allreduce_bench"), "--ranks", "1",
                     "--m", "16,128,1024,4096", "--n", "8192", "--k", "7168"]))
    if "moe" in args.only:
        for e, k, h, f in MODELS:
            out.append(("moe", f"moe_{e}_{k}.csv",
                        [sys.executable, os.path.join(HERE, "moe_bench.py"), "--lib", args.lib,
                         "--tokens", "128,1024,4096", "--ffn-tokens", "128,1024,4096",
                         "--experts", str(e), "--topk", str(k), "--hidden", str(h), "--ffn",
                         str(f)]))
    return out


def ratios(path):
    """[(family, case, which, ratio)] from one table."""
    name = os.path.basename(path)
    out = []
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            def add(family, case, which, text):
                if text not in (None, ""):
                    out.append((family, case, which, float(text)))
            if name == "gemm.csv":
                add("gemm", row["case"], "auto", row.get("cublas_over_mkc"))
                add("gemm", row["case"], "tuned", row.get("cublas_over_tuned"))
            elif name == "gemm_allreduce.csv":
                over = row.get("mkc_over_gemm")
                if over not in (None, ""):
                    out.append(("gemm_allreduce", f"M {row['m']}", "fused", 1.0 / float(over)))
            elif name.startswith("moe_"):
                model = name[len("moe_"):-len(".csv")].replace("_", " top-")
                add("moe", f"{row['case']} E {model} T {row['T']}", "auto", row.get("ratio"))
    return out


def summarize(directory):
    """Prints each family's ratios' minimum and geometric mean, and the whole sweep's; returns
    the number of ratios read."""
    rows = []
    for path in sorted(glob.glob(os.path.join(directory, "*.csv"))):
        rows += ratios(path)
    groups = {}
    for family, case, which, r in rows:
        groups.setdefault((family, which), []).append((r, case))
    for (family, which), vals in sorted(groups.items()):
        lo = min(vals)
        gm = math.exp(sum(math.log(r) for r, _ in vals) / len(vals))
        print(f"sweep: {family:<15} {which:<6} {len(vals):3d} cases: geometric mean {gm:.3f}, "
              f"minimum {lo[0]:.3f} ({lo[1]})")
    mine = [r for (family, which), vals in groups.items() if which != "tuned" for r, _ in vals]
    if mine:
        print(f"sweep: every case, mkc's own pick: geometric mean "
              f"{math.exp(sum(math.log(r) for r in mine) / len(mine)):.3f}, minimum "
              f"{min(mine):.3f} over {len(mine)} cases")
    return len(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bin", default=os.path.join(HERE, "..", ".device", "bin"),
                    help="folder with gemm_bench and gemm_allreduce_bench (tools/gpu_bundle.sh)")
    ap.add_argument("--lib", default="", help="libmkc.so for moe_bench.py (default: in --bin)")
    ap.add_argument("--tune", type=int, default=3, help="gemm: candidates tuned beyond the pick")
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--out", default="sweep_out", help="folder for the tables and logs")
    ap.add_argument("--only", default=",".join(FAMILIES),
                    help="families to run: " + ", ".join(FAMILIES))
    ap.add_argument("--timeout", type=int, default=900, help="seconds per command")
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--summarize", metavar="DIR", help="summarize the tables in DIR, run nothing")
    args = ap.parse_args()
    args.only = [f for f in args.only.split(",") if f]
    bad = [f for f in args.only if f not in FAMILIES]
    if bad:
        ap.error(f"--only: unknown famil{'y' if len(bad) == 1 else 'ies'} {', '.join(bad)} "
                 f"(known: {', '.join(FAMILIES)})")
    if args.tune < 0 or args.iters < 1 or args.timeout < 1:
        ap.error("--tune must be >= 0, --iters and --timeout >= 1")
    if args.summarize:
        if not os.path.isdir(args.summarize):
            ap.error(f"--summarize: {args.summarize} is not a folder")
        return 0 if summarize(args.summarize) > 0 else 1
    args.bin = os.path.abspath(args.bin)
    args.out = os.path.abspath(args.out)
    args.lib = os.path.abspath(args.lib or os.path.join(args.bin, "libmkc.so"))
    cmds = commands(args)
    if args.dry_run:
        for family, table, argv in cmds:
            print(f"{family}: {' '.join(argv)} --csv {os.path.join(args.out, table)}")
        return 0
    os.makedirs(args.out, exist_ok=True)
    failed = []
    for family, table, argv in cmds:
        path = os.path.join(args.out, table)
        log = path[:-len(".csv")] + ".log"
        print(f"sweep: {family}: {' '.join(argv)}", flush=True)
        try:
            with open(log, "w") as fh:
                rc = subprocess.run(argv + ["--csv", path], stdout=fh, stderr=subprocess.STDOUT,
                                    timeout=args.timeout, cwd=args.bin).returncode
        except subprocess.TimeoutExpired:
            rc = "timed out"
        except OSError as e:
            rc = e.strerror
        if rc != 0 or not os.path.exists(path):
            failed.append(f"{family} ({table}): {rc}, see {log}")
    summarize(args.out)
    for f in failed:
        print(f"sweep: FAILED: {f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
