#!/usr/bin/env python3
"""Summarises a kernel trace of `mkc run --trace FILE` per task kind and per operation.

For each rank and each task kind (and, with --ops, each operation: the label up to its first '.'),
prints the tasks, when the first started and the last ended (µs from the launch's first task),
the CTA time they took together and the longest one. Shows where a launch spends its time: a
phase that starts late waits for another; one whose CTA time is small next to its span waits
inside its tasks.

With --gaps, also per rank and kind: the mean task time and the mean gap between one CTA's task
and its next (the persistent loop's own time: waits, dispatch, set-up outside the traced span).

  python3 tools/trace_summary.py trace.json [--ops] [--gaps]
"""
import argparse
import collections
import json
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--ops", action="store_true", help="group by operation, not task kind")
    ap.add_argument("--gaps", action="store_true",
                    help="also the mean task time and the mean gap before a CTA's next task")
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
    if args.gaps:
        print_gaps(events, args.ops)
    return 0


def print_gaps(events, ops):
    """Mean task time, and mean gap from a task's end to the start of its CTA's next task, per
    (rank, group) of the later task."""
    by_cta = collections.defaultdict(list)
    for e in events:
        by_cta[(e["pid"], e["tid"])].append(e)
    times = collections.defaultdict(list)
    gaps = collections.defaultdict(list)
    for (rank, _), es in by_cta.items():
        es.sort(key=lambda e: e["ts"])
        for i, e in enumerate(es):
            key = (rank, e["name"].split(".")[0] if ops else e["cat"])
            times[key].append(e["dur"])
            if i > 0:
                gaps[key].append(e["ts"] - (es[i - 1]["ts"] + es[i - 1]["dur"]))
    print(f"{'rank':>4} {'kind' if not ops else 'operation':<20} {'tasks':>6} {'mean us':>9}"
          f" {'mean gap us':>12} {'max gap us':>11}")
    for key in sorted(times):
        t, g = times[key], gaps[key]
        mean_gap = sum(g) / len(g) if g else 0.0
        print(f"{key[0]:>4} {key[1]:<20} {len(t):>6} {sum(t) / len(t):>9.2f} {mean_gap:>12.2f}"
              f" {max(g) if g else 0.0:>11.2f}")


if __name__ == "__main__":
    sys.exit(main())
