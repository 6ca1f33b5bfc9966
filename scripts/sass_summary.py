#!/usr/bin/env python3
"""Summarises `cuobjdump -sass` output: instructions per kernel and, per loop, its
body's size and opcodes.

usage: sass_summary.py SASS_FILE [KERNEL_REGEX] [BASE_SASS_FILE]

A loop is a backward branch: its body runs from the branch target to the branch.
Loops nested in a larger one are listed too (innermost last). Opcodes drop their
modifiers (IDP.4A.S8.S8 counts as IDP), and predicated instructions count like the
others: the hardware issues them either way. With a base file (the same kernels from
another build) each kernel's line shows both counts.

Why: ncu's instruction counts say a kernel issues more than its source suggests,
not where. Session 15 found this way that the grouped decode GEMV recomputed each
token's activation addresses and the weights' nibbles once per token
(docs/performance.md).
"""
import re
import subprocess
import sys
from collections import Counter

FUNC = re.compile(r"^\s*Function : (\S+)")
INSN = re.compile(r"^\s*/\*([0-9a-f]{4,})\*/\s+(.*?);")
BRANCH = re.compile(r"\bBRA\s+(?:\S+\s+)?0x([0-9a-f]+)")


def parse(path):
    """{kernel: [(address, text)]} in file order."""
    kernels, name = {}, None
    for line in open(path, errors="replace"):
        m = FUNC.match(line)
        if m:
            name = m.group(1)
            kernels[name] = []
            continue
        m = INSN.match(line)
        if m and name is not None:
            kernels[name].append((int(m.group(1), 16), m.group(2).strip()))
    return kernels


def opcode(text):
    words = text.split()
    if words and words[0].startswith("@"):
        words = words[1:]
    return words[0].split(".")[0] if words else "?"


def loops(insns):
    """(start, end) address pairs of backward branches, outermost first."""
    found = []
    for addr, text in insns:
        m = BRANCH.search(text)
        if m and int(m.group(1), 16) <= addr:
            found.append((int(m.group(1), 16), addr))
    return sorted(found, key=lambda se: (se[0], -se[1]))


def demangle(names):
    """{mangled: readable} through c++filt (or cu++filt) where one is installed."""
    for tool in ("c++filt", "cu++filt"):
        try:
            out = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            continue
        short = [re.sub(r"hf2q::cuda::\(anonymous namespace\)::", "", n) for n in out.splitlines()]
        if len(short) == len(names):
            return dict(zip(names, short))
    return {n: n for n in names}


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    kernels = parse(sys.argv[1])
    pattern = re.compile(sys.argv[2]) if len(sys.argv) > 2 else None
    base = parse(sys.argv[3]) if len(sys.argv) > 3 else {}
    readable = demangle(list(kernels))
    for name, insns in kernels.items():
        if pattern and not pattern.search(name):
            continue
        # the padding after EXIT (BRA to itself, NOPs) is not code
        body = [(a, t) for a, t in insns if not t.startswith("NOP")]
        line = f"{readable[name]}: {len(body)} instructions"
        if name in base:
            line += f" (base {len([1 for _, t in base[name] if not t.startswith('NOP')])})"
        print(line)
        for start, end in loops(body):
            inside = [t for a, t in body if start <= a <= end]
            if len(inside) < 4:  # spin loops and the trailing self-branch
                continue
            ops = Counter(opcode(t) for t in inside)
            top = " ".join(f"{op} {n}" for op, n in ops.most_common(12))
            print(f"  loop {start:#06x}-{end:#06x}: {len(inside)} instructions: {top}")


if __name__ == "__main__":
    main()
