#!/usr/bin/env python3
"""Random mutations of every sample schedule through `mkc check`, `compile --emit plan` and
`verify` (at small shapes), as a hostile or careless user would write them.

Each mutation edits one sample a few times at random: a token deleted, duplicated or swapped with
its neighbour, a number made 0, -1, huge or odd, a name replaced by another name of the file, an
`after` clause added pointing anywhere (forward, backward, at itself, into a loop), a line
duplicated or dropped, a device body given a comment, a digraph, a digit separator, a string or a
directive. Every command must end on its own with exit 0 (accepted) or 1 (a diagnostic): never a
signal, never exit 2 (an environment error or a bug: `bad_alloc` is one) or 70 (an internal
error), within the time limit and under the memory limit (the address space is capped, so an
allocation past it fails inside mkc instead of swapping the machine).

Usage: tools/mutate.py [--mkc PATH] [--count N] [--seed S] [--only NAME] [--seconds S]
                       [--memory-mb M] [--keep DIR]
Exit 0 when every command of every mutation behaved; 1 otherwise, with the failing mutations
written to --keep (default out/mutate/) to replay.
"""
import argparse
import json
import os
import random
import re
import resource
import signal
import subprocess
import sys
import tempfile
import time

def small_shapes(samples_dir):
    """{sample: {param: value}} from samples/small_shapes.json (beside the samples)."""
    with open(os.path.join(samples_dir, "small_shapes.json")) as f:
        return json.load(f)["shapes"]

TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+|->|\.\.|\S")
NUMBERS = ["0", "1", "-1", "3", "7", "127", "4097", "65536", "1000000007", "4294967296",
           "9223372036854775807", "99999999999999999999"]
BODY_JUNK = ["/*\n*/ #include \"/etc/passwd\"\n", "%> __global__ void evil() <%", "1'0",
             "\"unterminated", "'x", "/* never closed", "R\"d( } )d\"", "_Pragma(\"once\")",
             "}", "{", "// }\n", "\\\n"]


def mutate(text, rng):
    """One random edit of `text`."""
    tokens = [(m.start(), m.end()) for m in TOKEN.finditer(text)]
    names = sorted({text[a:b] for a, b in tokens if re.match(r"[A-Za-z_]", text[a:b])})
    lines = text.split("\n")
    kind = rng.randrange(9)
    if kind == 0 and tokens:  # delete a token
        a, b = rng.choice(tokens)
        return text[:a] + text[b:]
    if kind == 1 and tokens:  # duplicate a token
        a, b = rng.choice(tokens)
        return text[:b] + " " + text[a:b] + text[b:]
    if kind == 2 and len(tokens) > 1:  # swap a token with the next
        i = rng.randrange(len(tokens) - 1)
        (a, b), (c, d) = tokens[i], tokens[i + 1]
        return text[:a] + text[c:d] + text[b:c] + text[a:b] + text[d:]
    if kind == 3:  # a number made extreme
        nums = [(a, b) for a, b in tokens if text[a:b].isdigit()]
        if nums:
            a, b = rng.choice(nums)
            return text[:a] + rng.choice(NUMBERS) + text[b:]
    if kind == 4 and names:  # a name replaced by another of the file
        spots = [(a, b) for a, b in tokens if re.match(r"[A-Za-z_]", text[a:b])]
        a, b = rng.choice(spots)
        return text[:a] + rng.choice(names) + text[b:]
    if kind == 5:  # an `after` clause on an operation, naming anything
        ops = [i for i, l in enumerate(lines) if re.match(r"\s*(compute|comm)\s", l)]
        opnames = [m.group(1) for l in lines for m in [re.match(r"\s*(?:compute|comm)\s+(\w+)", l)]
                   if m]
        if ops and opnames:
            i = rng.choice(ops)
            target = rng.choice(opnames)
            suffix = rng.choice(["", ".tile", ".chunk", "[step + 1]", "[step - 1]", "[0]", "[i + 1]"])
            lines[i] += f" after {target}{suffix}"
            return "\n".join(lines)
    if kind == 6 and len(lines) > 2:  # a line duplicated
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
        return "\n".join(lines)
    if kind == 7 and len(lines) > 2:  # a line dropped
        del lines[rng.randrange(len(lines))]
        return "\n".join(lines)
    # A device body, or any `{`, given something C++ reads differently.
    braces = [m.end() for m in re.finditer(r"\{", text)]
    if braces:
        at = rng.choice(braces)
        return text[:at] + " " + rng.choice(BODY_JUNK) + " " + text[at:]
    return text


def run(cmd, seconds, memory_mb):
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        os.setsid()

    start = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=seconds,
                           preexec_fn=limit)
        return p.returncode, time.monotonic() - start, p.stderr.decode(errors="replace")
    except subprocess.TimeoutExpired:
        return None, time.monotonic() - start, ""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mkc", default="bazel-bin/mkc", help="an mkc built without sanitizers")
    ap.add_argument("--count", type=int, default=300, help="mutations per sample (300)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="", help="samples whose name contains this")
    ap.add_argument("--seconds", type=float, default=20.0, help="time limit per command (20)")
    ap.add_argument("--memory-mb", type=int, default=2048, help="address-space limit (2048)")
    ap.add_argument("--keep", default="out/mutate", help="where failing mutations are written")
    args = ap.parse_args()
    if not os.access(args.mkc, os.X_OK):
        sys.exit(f"mutate: no mkc at `{args.mkc}` (bazel build -c opt //:mkc)")
    rng = random.Random(args.seed)
    work = tempfile.mkdtemp(prefix="mkc-mutate-")
    failures, runs, outcomes = [], 0, {0: 0, 1: 0}
    shapes = small_shapes("samples")  # where `mkc verify`'s interpreter runs
    names = sorted(n for n in shapes if args.only in n)
    for name in names:
        with open(f"samples/{name}.mks") as f:
            original = f.read()
        small = [x for k, v in shapes[name].items() for x in ("-D", f"{k}={v}")]
        for k in range(args.count):
            text = original
            for _ in range(rng.randint(1, 3)):
                text = mutate(text, rng)
            path = os.path.join(work, f"{name}.m{k}.mks")
            with open(path, "w") as f:
                f.write(text)
            ranks = str(rng.choice([1, 2, 3, 4]))
            cmds = [
                ("check", [args.mkc, "check", path]),
                ("compile", [args.mkc, "compile", "--emit", "plan", "--ranks", ranks, "-o", work,
                             path]),
                ("verify", [args.mkc, "verify", "--ranks", ranks, "--interleavings", "1"] + small +
                 [path]),
            ]
            for what, cmd in cmds:
                rc, wall, err = run(cmd, args.seconds, args.memory_mb)
                runs += 1
                if rc in (0, 1):
                    outcomes[rc] += 1
                    continue
                verdict = (f"did not finish in {args.seconds:.0f} s" if rc is None
                           else f"signal {-rc}" if rc < 0 else f"exit {rc}")
                last = err.strip().splitlines()[-1][:200] if err.strip() else ""
                failures.append((name, k, what, verdict, last, text, cmd))
                print(f"mutate: FAIL {name} #{k} {what} (R {ranks}): {verdict} {last}", flush=True)
        print(f"mutate: {name}: {args.count} mutations done ({len(failures)} failures so far)",
              flush=True)
    if failures:
        os.makedirs(args.keep, exist_ok=True)
        for name, k, what, verdict, last, text, cmd in failures:
            base = os.path.join(args.keep, f"{name}.m{k}.{what}")
            with open(base + ".mks", "w") as f:
                f.write(text)
            with open(base + ".txt", "w") as f:
                f.write(f"{verdict}\n{last}\n{' '.join(cmd)}\n")
    print(f"mutate: {runs} commands over {len(names)} samples x {args.count} mutations: "
          f"{outcomes[0]} accepted, {outcomes[1]} refused with a diagnostic, {len(failures)} failed"
          f" (limits {args.seconds:.0f} s and {args.memory_mb} MB per command)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
