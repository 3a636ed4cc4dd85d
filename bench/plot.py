#!/usr/bin/env python3
"""Draws the benchmarks' --csv tables: one PNG per bench in DIR.

    python3 bench/plot.py gemm.csv allreduce.csv [more.csv ...] -o DIR

Each CSV is what a bench wrote with --csv FILE (bench/csv.h): a header, then one row per measured
case. Rows are grouped by their `bench` column (the file's name when there is none), so several
runs of one bench (two machines, before and after a change) share a figure, one line per run.

What is drawn comes from the column names, so a table with columns missing, added or empty still
plots what it has:
  x axis    the first of `bytes`, `m`, `lines`, `ranks` with numbers that tell the rows apart (log scale
            when it spans a lot), else the `case` labels in order (where `case` does not tell
            the rows apart: the parameter columns that do, e.g. `S=16384 D=128 causal=1`)
  panels    times (`*_us`, `*_ms`), ratios (`*_over_*`, `ratio*`), rates (`*tflops`, `*_gbs`); a panel
            without a number in it is left out
Cells that are empty or not numbers (n/a) are skipped. Needs matplotlib (the GPU machines have
it); nothing else outside the standard library.
"""

import argparse
import csv
import math
import os
import sys

X_COLUMNS = ("bytes", "m", "lines", "ranks")
PANELS = (
    ("time", lambda c: c.endswith("_us") or c.endswith("_ms")),
    ("ratio", lambda c: "_over_" in c or c == "ratio" or c.startswith("ratio_")),
    ("rate", lambda c: c.endswith("tflops") or c.endswith("_gbs")),
)


def number(text):
    """The cell as a float, or None when it is empty or not a finite number."""
    try:
        v = float(text)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def read_tables(paths):
    """{bench: [(label, rows)]}: the rows of each file, grouped by bench."""
    tables = {}
    for path in paths:
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if any((v or "").strip() for v in r.values())]
        if not rows:
            print(f"plot.py: {path}: no rows, skipped", file=sys.stderr)
            continue
        stem = os.path.splitext(os.path.basename(path))[0]
        by_bench = {}
        for r in rows:
            by_bench.setdefault((r.get("bench") or "").strip() or stem, []).append(r)
        for bench, bench_rows in by_bench.items():
            tables.setdefault(bench, []).append((stem, bench_rows))
    return tables


def x_axis(runs):
    """(column, numeric) for the x axis of these runs: a size column that tells the rows of a run
    apart while the other sizes stay put (GEMM shapes that vary N and K too are drawn by their
    `case` labels instead)."""
    for col in X_COLUMNS:
        if not any(number(r.get(col)) is not None for _, rows in runs for r in rows):
            continue
        ok = True
        for _, rows in runs:
            xs = [number(r.get(col)) for r in rows if number(r.get(col)) is not None]
            others = [c for c in ("n", "k") if c != col and c in rows[0]]
            if len(set(xs)) != len(xs) or any(len({r.get(c) for r in rows}) > 1 for c in others):
                ok = False
        if ok:
            return col, True
    return "case", False


def measured(column):
    """True for a column that holds a result rather than a case's parameter."""
    return (any(wanted(column) for _, wanted in PANELS) or column.startswith("rel_")
            or column in ("paths", "unwritten", "ok", "registers", "spill_bytes"))


def row_labels(runs):
    """A label for each row (key: run index, row index): its `case`, or, where `case` does not
    tell the rows apart, the parameters that do (e.g. `S=16384 D=128 causal=1`)."""
    all_rows = [r for _, rows in runs for r in rows]
    cases = [(r.get("case") or "").strip() for r in all_rows]
    keys = [c for c in all_rows[0].keys()
            if c and not measured(c) and len({(r.get(c) or "").strip() for r in all_rows}) > 1]
    labels = {}
    for ri, (_, rows) in enumerate(runs):
        for i, r in enumerate(rows):
            if len(set(cases)) == len(cases) and cases[0]:
                label = (r.get("case") or "").strip()
            else:
                parts = []
                for c in keys:
                    v = (r.get(c) or "").strip()
                    if v:
                        parts.append(v if c == "case" else f"{c}={v}")
                label = " ".join(parts) or str(i)
            labels[(ri, i)] = label
    return labels


def spread(values):
    positive = [v for v in values if v is not None and v > 0]
    return max(positive) / min(positive) if len(positive) >= 2 else 1.0


def draw(bench, runs, out_dir, plt):
    columns = []
    for _, rows in runs:
        for c in rows[0].keys():
            if c and c not in columns:
                columns.append(c)
    panels = []
    for title, wanted in PANELS:
        cols = [c for c in columns if wanted(c)
                and any(number(r.get(c)) is not None for _, rows in runs for r in rows)]
        if cols:
            panels.append((title, cols))
    if not panels:
        print(f"plot.py: {bench}: no time, ratio or rate column with numbers, skipped",
              file=sys.stderr)
        return None
    x_col, numeric = x_axis(runs)
    if numeric:
        for stem, rows in runs:
            if all(number(r.get(x_col)) is None for r in rows):
                print(f"plot.py: {bench}: {stem} has no numbers in `{x_col}`, left out",
                      file=sys.stderr)
    labels = []
    row_label = row_labels(runs)
    if not numeric:
        for key in row_label.values():
            if key not in labels:
                labels.append(key)
    fig, axes = plt.subplots(len(panels), 1, figsize=(8, 3.2 * len(panels)), squeeze=False)
    for (title, cols), ax in zip(panels, axes[:, 0]):
        values = []
        for ri, (stem, rows) in enumerate(runs):
            for c in cols:
                pts = []
                for i, r in enumerate(rows):
                    y = number(r.get(c))
                    if numeric:
                        x = number(r.get(x_col))
                    else:
                        x = labels.index(row_label[(ri, i)])
                    if x is not None and y is not None:
                        pts.append((x, y))
                if not pts:
                    continue
                pts.sort()
                values += [y for _, y in pts]
                name = c if len(runs) == 1 else f"{c} ({stem})"
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        if numeric and spread([number(r.get(x_col)) for _, rows in runs for r in rows]) > 16:
            ax.set_xscale("log", base=2)
        if title != "ratio" and spread(values) > 20:
            ax.set_yscale("log")
        if title == "ratio":
            ax.axhline(1.0, color="grey", linewidth=0.8)
        if not numeric:
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=30, ha="right", fontsize=8)
        ax.set_xlabel(x_col)
        ax.set_ylabel(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    axes[0, 0].set_title(bench)
    fig.tight_layout()
    path = os.path.join(out_dir, f"{bench}.png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv):
    parser = argparse.ArgumentParser(description="Draw the benchmarks' --csv tables.")
    parser.add_argument("csv", nargs="+", help="tables written with a bench's --csv FILE")
    parser.add_argument("-o", "--out", required=True, help="directory for the PNGs")
    args = parser.parse_args(argv)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("plot.py: needs matplotlib (pip install matplotlib)", file=sys.stderr)
        return 2
    missing = [p for p in args.csv if not os.path.isfile(p)]
    if missing:
        print(f"plot.py: no such file: {', '.join(missing)}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    tables = read_tables(args.csv)
    written = [p for bench, runs in sorted(tables.items())
               if (p := draw(bench, runs, args.out, plt)) is not None]
    for p in written:
        print(p)
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
