#!/usr/bin/env python3
"""Where a kernel's executed instructions go, from ncu's per-SASS-line counts: by opcode, and by how
often a line runs (a loop's body runs as often as its blocks, a tile's set-up as often as its
tiles), with the longest stretches of lines that run equally often.

Reads the CSV of `ncu -i REPORT --page source --csv --print-source sass` (a report taken with
`--section SourceCounters`), one or several, and prints for each: the total, the opcodes' shares
of it (and of the stall samples), the groups of lines by execution count, and the --top stretches
of consecutive lines with the same count (their address range, lines, instructions, main
opcodes). Comparing two kernels' groups says whether the difference is per block or per tile.

  ncu --section SourceCounters -o /tmp/k -c 1 ./app
  ncu -i /tmp/k.ncu-rep --page source --csv --print-source sass > k.csv
  python3 tools/ncu_lines.py k.csv [other.csv] [--top 20]
"""
import argparse
import collections
import csv
import re
import sys

PREDICATE = re.compile(r"^@!?U?P[T0-9]+\s+")


def number(text):
    """ncu's counts may carry thousands separators; an empty cell is 0."""
    text = text.replace(",", "").strip()
    return int(text) if text else 0


def read(path):
    """[(address, instruction, executed, stall samples)] of one CSV, in address order."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    head = next((i for i, r in enumerate(rows) if "Source" in r and "Instructions Executed" in r),
                None)
    if head is None:
        raise ValueError(f"{path}: no header with `Source` and `Instructions Executed` (the CSV of "
                         "`ncu -i REPORT --page source --csv --print-source sass` expected)")
    cols = rows[head]
    src, executed = cols.index("Source"), cols.index("Instructions Executed")
    stalls = cols.index("Warp Stall Sampling (All Samples)") if (
        "Warp Stall Sampling (All Samples)" in cols) else None
    lines = []
    for r in rows[head + 1:]:
        if len(r) <= max(src, executed) or not r[0].startswith("0x"):
            continue
        try:
            lines.append((int(r[0], 16), r[src].strip(), number(r[executed]),
                          number(r[stalls]) if stalls is not None and stalls < len(r) else 0))
        except ValueError:
            continue
    if not lines:
        raise ValueError(f"{path}: no SASS lines with counts")
    lines.sort()
    return lines


def opcode(instruction):
    """The opcode without predicate and modifiers: `@!P0 FMNMX.FTZ R1, ...` -> FMNMX."""
    words = PREDICATE.sub("", instruction).split()
    return words[0].split(".")[0] if words else "?"


def stretches(lines):
    """Consecutive lines (16 bytes apart) with the same execution count, as
    [first address, last address, count, [instructions]]."""
    out = []
    for address, text, executed, _ in lines:
        if executed == 0:
            continue
        if out and out[-1][2] == executed and address == out[-1][1] + 16:
            out[-1][1] = address
            out[-1][3].append(text)
        else:
            out.append([address, address, executed, [text]])
    return out


def describe(path, lines, top):
    base = lines[0][0]
    total = sum(x[2] for x in lines)
    samples = sum(x[3] for x in lines)
    print(f"== {path}: {total / 1e6:.2f} M warp instructions executed, {len(lines)} SASS lines, "
          f"{samples} stall samples")
    if total == 0:
        return
    by_op = collections.Counter()
    stall_op = collections.Counter()
    for _, text, executed, stall in lines:
        by_op[opcode(text)] += executed
        stall_op[opcode(text)] += stall
    print("  by opcode:")
    for op, n in by_op.most_common(16):
        print(f"    {op:10s} {n / 1e6:8.2f} M {100 * n / total:5.1f}%   stalls "
              f"{100 * stall_op[op] / max(samples, 1):5.1f}%")
    by_count = collections.Counter()
    lines_of = collections.Counter()
    for _, _, executed, _ in lines:
        if executed == 0:
            continue
        by_count[executed] += executed
        lines_of[executed] += 1
    print("  by how often a line runs:")
    for count, n in by_count.most_common(10):
        print(f"    {count:>10} times: {lines_of[count]:5} lines, {n / 1e6:8.2f} M "
              f"{100 * n / total:5.1f}%")
    print(f"  the {top} largest stretches of lines run equally often (offsets from the first line):")
    runs = sorted(stretches(lines), key=lambda s: -s[2] * len(s[3]))[:top]
    for first, last, count, texts in runs:
        ops = collections.Counter(opcode(t) for t in texts).most_common(5)
        print(f"    {first - base:#07x}-{last - base:#07x} {len(texts):4} lines x {count:>9} = "
              f"{count * len(texts) / 1e6:7.2f} M {100 * count * len(texts) / total:5.1f}%  "
              + " ".join(f"{op} {n}" for op, n in ops))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+", help="ncu --page source --csv --print-source sass output")
    ap.add_argument("--top", type=int, default=12, help="stretches to list (default 12)")
    args = ap.parse_args()
    if args.top < 0:
        print("ncu_lines: --top must be 0 or more", file=sys.stderr)
        return 2
    for path in args.csv:
        try:
            lines = read(path)
        except (OSError, ValueError) as e:
            print(f"ncu_lines: {e}", file=sys.stderr)
            return 1
        describe(path, lines, args.top)
    return 0


if __name__ == "__main__":
    sys.exit(main())
