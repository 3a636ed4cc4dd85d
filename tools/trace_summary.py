#!/usr/bin/env python3
"""Summarises a kernel trace of `mkc run --trace FILE` per task kind and per operation.

For each rank and each task kind (and, with --ops, each operation: the label up to its first '.'),
prints the tasks, when the first started and the last ended (µs from the launch's first task),
the CTA time they took together and the longest one. Shows where a launch spends its time: a
phase that starts late waits for another; one whose CTA time is small next to its span waits
inside its tasks.

  python3 tools/trace_summary.py trace.json [--ops]
"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--ops", action="store_true", help="group by operation, not task kind")
    args = ap.parse_args()
    with open(args.trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events:
        print("trace_summary: no task events in", args.trace, file=sys.stderr)
        return 1
    groups = collections.defaultdict(list)
    for e in events:
        key = e["name"].split(".")[0] if args.ops else e["cat"]
        groups[(e["pid"], key)].append(e)
    print(f"{'rank':>4} {'kind' if not args.ops else 'operation':<20} {'tasks':>6} {'start us':>10}"
          f" {'end us':>10} {'CTA us':>11} {'longest us':>11}")
    for (rank, key), es in sorted(groups.items(), key=lambda kv: (kv[0][0], min(e["ts"] for e in kv[1]))):
        start = min(e["ts"] for e in es)
        end = max(e["ts"] + e["dur"] for e in es)
        busy = sum(e["dur"] for e in es)
        longest = max(e["dur"] for e in es)
        print(f"{rank:>4} {key:<20} {len(es):>6} {start:>10.1f} {end:>10.1f} {busy:>11.1f}"
              f" {longest:>11.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
