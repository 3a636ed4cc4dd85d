#!/usr/bin/env python3
"""The tensor-core loops of a kernel's SASS, one line each: what a block of the loop costs.

Reads `cuobjdump -sass` output (a file, or - for standard input) and prints, for every loop (a
backward branch) whose body holds a wgmma (HGMMA), innermost first: its address range, the
instructions in it, the HGMMAs, the moves from vector to uniform registers (R2UR: scalar work
the compiler did per thread, e.g. a loop bound it did not see to be warp-uniform), the uniform
datapath's instructions, MUFU.EX2, and where the wgmma waits (WARPGROUP.DEPBAR.LE gsb0, N) sit
against the first and last MUFU (a wait before the exps keeps them from running under the wgmma
it waits for).

  cuobjdump -sass kernel.cubin | python3 tools/sass_loops.py -

cuobjdump is on the GPU machine; here, Triton's wheel carries one (docs/COMPILER.md).
"""
import argparse
import re
import sys

LINE = re.compile(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
TARGET = re.compile(r"\bBRA\b.*?0x([0-9a-f]+)")
WAIT = re.compile(r"WARPGROUP\.DEPBAR\.LE\s+gsb0,\s*0x([0-9a-f]+)")


def read(lines):
    """{function name: [(address, instruction text), ...]}, in order: cuobjdump starts each
    function's addresses at 0 (a kernel with a __noinline__ function has two)."""
    functions = {}
    current = functions.setdefault("", [])
    for line in lines:
        f = FUNCTION.match(line)
        if f:
            current = functions.setdefault(f.group(1), [])
            continue
        m = LINE.match(line)
        if m:
            current.append((int(m.group(1), 16), m.group(2)))
    return {name: ins for name, ins in functions.items() if ins}


def opcode(text):
    """The opcode's first part: `@!P0 BAR.ARV R1, 0x100` -> `BAR`."""
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


def loops(ins):
    """Bodies (lists of (index, address, text)) of the backward branches that hold an HGMMA."""
    found = []
    for i, (addr, text) in enumerate(ins):
        m = TARGET.search(text)
        if not m or opcode(text) != "BRA":
            continue
        target = int(m.group(1), 16)
        if target >= addr:
            continue
        body = [(j, a, t) for j, (a, t) in enumerate(ins) if target <= a <= addr]
        if any(opcode(t) == "HGMMA" for _, _, t in body):
            found.append(body)
    found.sort(key=len)
    return found


def describe(body):
    ops = [opcode(t) for _, _, t in body]
    count = lambda name: sum(1 for o in ops if o == name)
    uniform = sum(1 for o in ops if o.startswith("U"))
    mufu = [k for k, (_, _, t) in enumerate(body) if "MUFU.EX2" in t]
    waits = []
    for k, (_, _, t) in enumerate(body):
        m = WAIT.search(t)
        if m:
            waits.append((k, int(m.group(1), 16)))
    wait_text = ", ".join(
        f"wait {n} at {k}" + (f" ({sum(1 for x in mufu if x < k)} of {len(mufu)} MUFU before)"
                              if mufu else "")
        for k, n in waits) or "no wgmma wait"
    return (f"loop {body[0][1]:#x}-{body[-1][1]:#x}: {len(body)} instructions, "
            f"{count('HGMMA')} HGMMA, {count('R2UR')} R2UR, {uniform} uniform, "
            f"{len(mufu)} MUFU.EX2; {wait_text}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", help="cuobjdump -sass output, or - for standard input")
    args = ap.parse_args()
    src = sys.stdin if args.sass == "-" else open(args.sass, encoding="utf-8", errors="replace")
    functions = read(src)
    if not functions:
        print("sass_loops: no SASS instructions in the input (cuobjdump -sass output expected)",
              file=sys.stderr)
        return 1
    found = 0
    for name, ins in functions.items():
        for body in loops(ins):
            print((f"{name}: " if len(functions) > 1 else "") + describe(body))
            found += 1
    if not found:
        # cuobjdump's branches name addresses (BRA 0x...); nvdisasm's name labels, not read here.
        print("sass_loops: no loop with a wgmma (HGMMA) in it (branches to addresses, as "
              "cuobjdump -sass writes them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
