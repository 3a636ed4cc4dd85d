#!/usr/bin/env python3
"""How a compile grows with the world size: time, peak memory and tasks per rank.

    python3 bench/compile_bench.py [--mkc bazel-bin/mkc] [--ranks 1,2,8,16,64]
                                   [--modes plan,rank,cold,own,warm,verify] [--only NAME] [--csv FILE]

For every sample schedule (samples/*.mks, at its defaults) and every world size R, it runs
`mkc compile` and measures the process: wall time, peak resident memory (wait4's ru_maxrss), the
plan's tasks (from the summary line) and the planning time mkc reports (everything before NVRTC).
Above 8 ranks the world is 8 ranks per node (`--ranks-per-node 8`), as a 2 x 8 GPU job would be.
Modes:
  plan   `--emit plan`: lowering, dependencies, scheduling and writing the plan's JSON
  rank   `--emit plan --rank 0`: the same for rank 0 alone (the ranks within two steps of it)
  cold   `--emit cubin --no-cache`: the whole compile, NVRTC included
  own    `--emit cubin --no-cache --rank 0`: what one process of a launched job compiles, rank
         0's plan (from the ranks within two steps) and its kernel alone, NVRTC included
  warm   `--emit cubin` after a cold one: planning, code generation and a JIT cache hit
  verify `mkc verify` at small shapes (samples/small_shapes.json): the whole-world plan with the
         verifier after every pass, and the CPU interpreter against the reference
cold, warm and own compile what `mkc run` and the API compile (the plan's tables as data, copied in at
load); `--tables source` measures the self-contained cubin `mkc compile` writes by default.
A compile mkc refuses (a limit it names) is a row with its one-line reason; one past --timeout
is a row saying so. Then, per sample, a plot of time against R (text; the CSV draws with
`python3 bench/plot.py FILE.csv -o DIR`, one figure per sample and mode, where matplotlib is).
Runs on any machine: NVRTC needs no GPU.
Exit status: 0 unless mkc crashed (a signal or an internal error, exit 70) or timed out.
"""

import argparse
import csv
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time

MODES = {
    "plan": ["compile", "--emit", "plan"],
    "rank": ["compile", "--emit", "plan", "--rank", "0"],
    "cold": ["compile", "--emit", "cubin", "--no-cache"],
    "own": ["compile", "--emit", "cubin", "--no-cache", "--rank", "0"],
    "warm": ["compile", "--emit", "cubin"],
    "verify": ["verify"],
}

# `mkc verify` runs the plan on the CPU interpreter, so it takes small shapes: these keep one launch
# under the interpreter's budget at 64 ranks (MoE's receive capacity grows with R).
def small_shapes(samples_dir):
    """{sample: {param: value}} from samples/small_shapes.json (beside the samples)."""
    with open(os.path.join(samples_dir, "small_shapes.json")) as f:
        return json.load(f)["shapes"]


def run(cmd, timeout, env):
    """Runs cmd; returns (exit code or None on timeout, wall s, peak MB, stdout, stderr)."""
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, env=env)
        deadline = start + timeout
        status = rusage = None
        while True:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid != 0:
                break
            if time.monotonic() > deadline:
                proc.kill()
                pid, status, rusage = os.wait4(proc.pid, 0)
                status = None
                break
            time.sleep(0.01)
        wall = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        code = None if status is None else os.waitstatus_to_exitcode(status)
        return (code, wall, rusage.ru_maxrss / 1024.0, out.read().decode(errors="replace"),
                err.read().decode(errors="replace"))


def first_error(text):
    for line in text.splitlines():
        if "error" in line:
            return line.strip()[:200]
    lines = text.strip().splitlines()
    return lines[-1][:200] if lines else ""


def measure(args, sample, ranks, mode, env, out_dir):
    name = os.path.basename(sample)[:-4]
    cmd = [args.mkc] + MODES[mode] + ["--ranks", str(ranks)]
    if mode == "verify":
        for k, v in args.small.get(name, {}).items():
            cmd += ["-D", f"{k}={v}"]
    else:
        cmd += ["-o", out_dir]
    if ranks > args.per_node:
        cmd += ["--ranks-per-node", str(args.per_node)]
    cmd.append(sample)
    code, wall, peak_mb, out, err = run(cmd, args.timeout, env)
    row = {"bench": f"compile_{name}_{mode}", "sample": name, "ranks": ranks, "mode": mode,
           "wall_ms": f"{wall * 1e3:.1f}", "peak_mb": f"{peak_mb:.0f}", "tasks": "",
           "tasks_per_rank": "", "planned_ms": "", "status": "ok"}
    if code is None:
        row["status"] = f"timeout after {args.timeout:.0f} s"
        return row, True
    if code != 0:
        row["status"] = f"exit {code}: " + first_error(err)
        # 1: the schedule or its limits (a user error); 3: the environment. Anything else is a bug.
        return row, code not in (1, 3)
    m = re.search(r"(\d+) tasks", out + err)
    if m:
        # A rank's plan holds the tasks of the ranks it needs too ("with the tasks of ranks 0, 2").
        # A kernel of one rank counts that rank's tasks.
        planned = 1 if mode == "own" else ranks
        near = re.search(r"with the tasks of ranks? ([0-9, ]+|none) it needs", out)
        if near:
            planned = 1 + len(re.findall(r"\d+", near.group(1)))
        row["tasks"] = m.group(1)
        row["tasks_per_rank"] = f"{int(m.group(1)) / planned:.0f}"
    m = re.search(r"planned in ([0-9.]+) s", out)
    if m:
        row["planned_ms"] = f"{float(m.group(1)) * 1e3:.0f}"
    return row, False


def text_plot(rows, width=48):
    """One line per (mode, R): a bar of wall time, log-scaled over the rows given."""
    times = [float(r["wall_ms"]) / 1e3 for r in rows if r["status"] == "ok"]
    if not times:
        return []
    lo, hi = math.log10(max(min(times), 1e-3)), math.log10(max(times))
    span = max(hi - lo, 1e-9)
    lines = []
    for r in rows:
        label = f"  {r['mode']:<6} R={r['ranks']:<3}"
        if r["status"] != "ok":
            lines.append(f"{label} {r['status'][:60]}")
            continue
        t = float(r["wall_ms"]) / 1e3
        n = 1 + int((width - 1) * (math.log10(max(t, 1e-3)) - lo) / span)
        lines.append(f"{label} {'#' * n:<{width}} {t:7.2f} s {float(r['peak_mb']):7.0f} MB")
    return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 2)[2])
    ap.add_argument("--mkc", default="bazel-bin/mkc", help="the mkc binary (default %(default)s)")
    ap.add_argument("--samples", default="samples", help="folder of .mks files")
    ap.add_argument("--only", default="", help="samples whose name contains this")
    ap.add_argument("--ranks", default="1,2,8,16,64", help="world sizes (default %(default)s)")
    ap.add_argument("--per-node", type=int, default=8,
                    help="ranks per node above this many ranks (default %(default)s)")
    ap.add_argument("--modes", default="plan,cold,warm", help="plan, rank, cold, own, warm, verify (comma-separated; default %(default)s)")
    ap.add_argument("--timeout", type=float, default=600, help="seconds per compile")
    ap.add_argument("--tables", default="data", choices=["data", "source"],
                    help="where the plan's tables go (MKC_TABLES): data, what a run compiles "
                         "(default), or source, what `mkc compile` writes alone")
    ap.add_argument("--csv", help="write the rows here")
    args = ap.parse_args()

    if not os.access(args.mkc, os.X_OK):
        sys.exit(f"compile_bench: no mkc binary at `{args.mkc}` (build it: bazel build -c opt //:mkc)")
    try:
        ranks = [int(r) for r in args.ranks.split(",")]
    except ValueError:
        sys.exit(f"compile_bench: --ranks `{args.ranks}`: expected comma-separated integers")
    if any(r < 1 for r in ranks):
        sys.exit("compile_bench: --ranks: every world size is at least 1")
    modes = args.modes.split(",")
    for m in modes:
        if m not in MODES:
            sys.exit(f"compile_bench: --modes: unknown mode `{m}` (plan, rank, cold, own, warm, verify)")
    if "warm" in modes and "cold" in modes:
        modes = [m for m in modes if m != "warm"] + ["warm"]  # warm needs the cold one's entry
    samples = sorted(s for s in glob.glob(os.path.join(args.samples, "*.mks"))
                     if args.only in os.path.basename(s))
    if not samples:
        sys.exit(f"compile_bench: no sample matches `{args.only}` in {args.samples}/")

    args.small = small_shapes(args.samples) if "verify" in modes else {}
    env = dict(os.environ)
    cache = tempfile.mkdtemp(prefix="mkc-compile-bench-cache-")
    env["MKC_CACHE_DIR"] = cache  # cold and warm are this run's own, not a stale cache's
    env.pop("MKC_DUMP_PASSES", None)
    env["MKC_TABLES"] = args.tables
    out_dir = tempfile.mkdtemp(prefix="mkc-compile-bench-")
    fields = ["bench", "sample", "ranks", "mode", "wall_ms", "planned_ms", "peak_mb", "tasks",
              "tasks_per_rank", "status"]
    rows, broken = [], False
    print(f"{'sample':<24} {'R':>3} {'mode':<6} {'wall ms':>9} {'peak MB':>8} {'planned ms':>10} "
          f"{'tasks/rank':>10}  status", flush=True)
    for sample in samples:
        mine = []
        for mode in modes:
            for r in ranks:
                row, bad = measure(args, sample, r, mode, env, out_dir)
                broken = broken or bad
                rows.append(row)
                mine.append(row)
                print(f"{row['sample']:<24} {r:>3} {mode:<6} {row['wall_ms']:>9} "
                      f"{row['peak_mb']:>8} {row['planned_ms']:>10} {row['tasks_per_rank']:>10}  "
                      f"{row['status']}", flush=True)
        print("\n".join(text_plot(mine)), flush=True)
    if args.csv:
        with open(args.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields, lineterminator="\n")
            w.writeheader()
            w.writerows(rows)
        print(f"wrote {args.csv}")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
