#!/usr/bin/env python3
"""Stress run of the front end and the planner over generated extreme schedules.

Each case is a schedule (and flags) built to hurt: long operator chains, deep nesting, huge loops
and shapes, tiny chunks and tiles, extreme world sizes and integers, tensors the CPU interpreter
cannot hold. For each, `mkc check` and `mkc compile --emit plan` (and for the memory cases `mkc
verify`) must end on their own with exit 0 (accepted) or 1 (a diagnostic), never
a signal, never exit 2 (an environment error or an mkc bug: `bad_alloc` is one), within the time
limit and under the memory limit (the address space is capped, so an allocation past it fails
inside mkc instead of swapping the machine).

Usage: tools/stress.py [--mkc PATH] [--seconds S] [--memory-mb M] [--keep DIR] [--only NAME]
Exit 0 when every case passes; 1 otherwise, with a line per failing case.
"""
import argparse
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time

I64_MIN = -(2**63)
I64_MAX = 2**63 - 1


def cases():
    """(name, schedule text, extra flags) for every extreme case."""
    out = []

    def add(name, text, flags=(), commands=("check", "compile")):
        out.append((name, text, list(flags), commands))

    chain = " + ".join(["1"] + ["0"] * 20000)
    add("binary-chain-20000", f"schedule s {{\n  param M = {chain}\n  input X : f32[M]\n}}\n")
    prod = " * ".join(["1"] * 20000)
    add("product-chain-20000", f"schedule s {{\n  param M = {prod}\n  input X : f32[M]\n}}\n")
    logic = " && ".join(["1 < 2"] * 5000)
    add("logic-chain-5000", f"schedule s {{\n  param M = ({logic}) + 1\n  input X : f32[M]\n}}\n")
    parens = "(" * 100000 + "1" + ")" * 100000
    add("parentheses-100000", f"schedule s {{\n  param M = {parens}\n  input X : f32[M]\n}}\n")
    unary = "-" * 100000 + "1"
    add("unary-100000", f"schedule s {{\n  param M = {unary}\n  input X : f32[M]\n}}\n")
    add("cdiv-overflow",
        f"schedule s {{\n  param M = cdiv({I64_MIN + 1} - 1, -1)\n  input X : f32[M]\n}}\n")
    add("mod-overflow",
        f"schedule s {{\n  param M = ({I64_MIN + 1} - 1) % -1 + 1\n  input X : f32[M]\n}}\n")
    add("mul-overflow", f"schedule s {{\n  param M = {I64_MAX} * {I64_MAX}\n  input X : f32[M]\n}}\n")
    add("literal-too-large",
        "schedule s {\n  param M = 99999999999999999999999999\n  input X : f32[M]\n}\n")
    add("identifier-1mb", "schedule s {\n  param " + "a" * (1 << 20) + " = 1\n}\n")
    add("tensor-1e15",
        "schedule s {\n  ranks R\n  input X : f32[1000000000000000] symmetric\n"
        "  comm ar = allreduce(X, sum) chunk(1000000)\n}\n")
    add("shape-overflow",
        f"schedule s {{\n  input X : f32[{I64_MAX}, {I64_MAX}]\n}}\n")
    add("chunk-1-large",
        "schedule s {\n  ranks R\n  input X : bf16[100000000] symmetric\n"
        "  comm ar = allreduce(X, sum) chunk(1)\n}\n")
    add("chunk-1-10000",
        "schedule s {\n  ranks R\n  input X : bf16[10000] symmetric\n"
        "  comm ar = allreduce(X, sum) chunk(1)\n}\n", ["--ranks", "2"])
    # Just under the check's chunk limit, over the plan's task budget: lowering used to sweep every
    # earlier chunk's tasks per chunk, so the refusal came after 52 s (2 ranks) to 269 s (8 ranks).
    reduction = ("schedule s {\n  ranks R\n  input X : f32[6400000] symmetric\n"
                 "  comm ar = allreduce(X, sum) chunk(64)\n}\n")
    add("reduction-100000-chunks", reduction, ["--ranks", "2"])
    add("reduction-100000-chunks-8-ranks", reduction, ["--ranks", "8"])
    add("reduction-100000-chunks-2-nodes", reduction, ["--ranks", "8", "--ranks-per-node", "4"])
    add("gemm-tile-1x1",
        "schedule s {\n  input A : bf16[8192, 8192]\n  input B : bf16[8192, 8192]\n"
        "  output C : bf16[8192, 8192]\n  compute mm = gemm(A, B -> C) tile(1, 1, 64)\n}\n")
    add("loop-length-overflow",
        f"schedule s {{\n  ranks R\n  input X : f32[1024] symmetric\n"
        f"  loop i in {-I64_MAX} .. 1 {{\n    comm ar = allreduce(X, sum)\n  }}\n}}\n")
    add("nested-loops-1000-cubed",
        "schedule s {\n  ranks R\n  input X : f32[1024] symmetric\n"
        "  loop i in 0 .. 1000 {\n    loop j in 0 .. 1000 {\n      loop k in 0 .. 1000 {\n"
        "        comm ar = allreduce(X, sum)\n      }\n    }\n  }\n}\n")
    add("after-chain-4096",
        "schedule s {\n  ranks R\n  input X : f32[1024] symmetric\n"
        "  loop i in 0 .. 4096 {\n    comm ar = allreduce(X, sum) after ar[i - 1]\n  }\n}\n",
        ["--ranks", "2"])
    nested = "schedule s {\n  ranks R\n  input X : f32[1024] symmetric\n"
    for d in range(8):
        nested += "  " * (d + 1) + f"loop i{d} in 0 .. 2 {{\n"
    nested += "  " * 9 + "comm ar = allreduce(X, sum) after ar[i7 - 1]\n"
    for d in reversed(range(8)):
        nested += "  " * (d + 1) + "}\n"
    nested += "}\n"
    add("loops-8-deep", nested, ["--ranks", "2"])
    add("many-ops-20000",
        "schedule s {\n  ranks R\n  input X : f32[64] symmetric\n"
        + "".join(f"  comm a{i} = allreduce(X, sum)\n" for i in range(20000)) + "}\n",
        ["--ranks", "2"])
    with open("samples/alltoall.mks") as f:
        alltoall = f.read()
    add("alltoall-1024-ranks", alltoall, ["--ranks", "1024"])
    add("alltoall-8-ranks-per-node-2", alltoall, ["--ranks", "8", "--ranks-per-node", "2"])
    # Found by tools/mutate.py: attention tiles of 7 query rows, each waiting for its K,V block's
    # 128 chunks. The schedule pass built an edge per (producer, consumer): 3.5 GB, bad_alloc.
    with open("samples/ring_attention.mks") as f:
        ring = f.read().replace("tile(128, 128)", "tile(7, 128)")
    add("ring-attention-tile-7-rows", ring, ["--ranks", "1"])
    with open("samples/gemm.mks") as f:
        gemm = f.read()
    add("sms-1e9", gemm, ["--sms", "1000000000"])
    add("define-huge", gemm, ["-D", f"M={I64_MAX}"])
    add("define-hex", gemm, ["-D", "M=0x1000"])
    add("roles-huge",
        "schedule s {\n  ranks R\n  input X : f32[1024] symmetric\n"
        "  roles compute = 1000000000, comm = 1000000000\n"
        "  comm ar = allreduce(X, sum)\n}\n", ["--ranks", "2"])
    add("device-include",
        "schedule s {\n  input X : f32[16]\n  output Y : f32[16]\n"
        "  device f(a: f32) -> f32 {\n#include \"/etc/passwd\"\n    return a;\n  }\n"
        "  compute m = map(f, X -> Y)\n}\n")
    # Memory that follows the input: `mkc verify` holds every buffer of every rank; an unused
    # scratch of 2^28 or 2^40 elements in a 256-element launch must be refused, located, at once.
    for log2 in (28, 40):
        add(f"verify-unused-scratch-2^{log2}",
            f"schedule s {{\n  ranks R\n  input X : f32[256]\n  output Y : f32[256]\n"
            f"  scratch S : f32[{2**log2}]\n  compute c = copy(X -> Y)\n}}\n",
            ["--ranks", "2"], ("check", "compile", "verify"))
    # 16 ranks of 4,096 elements each, through the plan and the interpreter; and at 64 a chunk of
    # one element, refused by the plan's size limit (with its place) instead of filling memory.
    for ranks, chunk in ((16, 512), (64, 1)):
        add(f"verify-{ranks}-ranks-chunk-{chunk}",
            "schedule s {\n  ranks R\n  input X : f32[4096] symmetric\n"
            f"  comm ar = allreduce(X, sum) chunk({chunk})\n}}\n", ["--ranks", str(ranks)],
            ("verify",))
    add("empty", "")
    add("binary-garbage", "\x00\xff\xfe" * 10000)
    return out


def run(cmd, seconds, memory_mb):
    """Runs cmd; returns (exit status or -signal or None past the limit, wall seconds, output
    tail)."""
    def limits():
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        os.setsid()

    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            preexec_fn=limits)
    try:
        out, _ = proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return None, time.monotonic() - start, out.decode(errors="replace")[-300:]
    return proc.returncode, time.monotonic() - start, out.decode(errors="replace")[-300:]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mkc", default="bazel-bin/mkc", help="the mkc binary (default bazel-bin/mkc)")
    ap.add_argument("--seconds", type=float, default=10.0, help="time limit per command (10)")
    ap.add_argument("--memory-mb", type=int, default=2048, help="address-space limit (2048)")
    ap.add_argument("--keep", help="write the generated schedules to this directory")
    ap.add_argument("--only", help="run only the case of this name")
    args = ap.parse_args()
    if not os.access(args.mkc, os.X_OK):
        print(f"stress: no mkc binary at {args.mkc} (bazel build -c opt //:mkc)", file=sys.stderr)
        return 2
    # ASan reserves terabytes of address space: the limit only works on a plain build.
    try:
        symbols = subprocess.run(["nm", "-an", args.mkc], capture_output=True, text=True).stdout
    except OSError:
        symbols = ""
    if "__asan_init" in symbols:
        print("stress: use a build without AddressSanitizer (bazel build -c opt //:mkc)",
              file=sys.stderr)
        return 2
    work = args.keep or tempfile.mkdtemp(prefix="mkc_stress_")
    os.makedirs(work, exist_ok=True)
    failed = 0
    total = 0
    for name, text, flags, commands in cases():
        if args.only and name != args.only:
            continue
        path = os.path.join(work, name + ".mks")
        with open(path, "w", encoding="latin-1") as f:
            f.write(text)
        every = {"check": ["check", path], "compile": ["compile", path, "--emit", "plan", "-o", work],
                 "verify": ["verify", path]}
        for cmd in (every[c] for c in commands):
            total += 1
            rc, wall, tail = run([args.mkc] + cmd + flags, args.seconds, args.memory_mb)
            verdict = "ok"
            if rc is None:
                verdict = f"did not finish in {args.seconds:.0f} s"
            elif rc < 0:
                verdict = f"killed by signal {-rc}"
            elif rc not in (0, 1):
                verdict = f"exit {rc}"
            elif "bad_alloc" in tail:
                verdict = "bad_alloc"
            status = "PASS" if verdict == "ok" else "FAIL"
            print(f"stress: {status} {name:<28} {cmd[0]:<7} rc={rc} {wall:6.2f} s  {verdict}")
            if verdict != "ok":
                failed += 1
                print("  " + tail.strip().replace("\n", "\n  "))
    print(f"stress: {total - failed} passed, {failed} failed "
          f"(limits {args.seconds:.0f} s and {args.memory_mb} MB per command)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
