#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel name from its --csv output.

usage: ncu_kernel_sums.py NCU_CSV_LOG TOKENS [BASE_NCU_CSV_LOG]
Prints, per kernel (template arguments kept, parameters dropped), the calls and
microseconds per decode token (or per step: TOKENS is what the log's time is divided
by), largest first, and the total kernel time per token. With a second log (the same
command under a baseline build), prints both and the difference per kernel, largest
change first: the census that found session 11's 64-sequence regression.
"""
import csv
import re
import sys
from collections import defaultdict


def census(path: str, tokens: float):
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    time_us = defaultdict(float)
    calls = defaultdict(int)
    for r in csv.DictReader(lines):
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = re.sub(r"\(.*", "", r["Kernel Name"])
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        time_us[name] += v * scale / tokens
        calls[name] += 1
    return time_us, {k: c / tokens for k, c in calls.items()}


def main() -> None:
    if len(sys.argv) not in (3, 4):
        sys.exit(__doc__)
    tokens = float(sys.argv[2])
    t, c = census(sys.argv[1], tokens)
    total = sum(t.values())
    print(f"kernel time per token: {total:.1f} us over {sum(c.values()):.0f} kernels")
    if len(sys.argv) == 3:
        for name, us in sorted(t.items(), key=lambda kv: -kv[1])[:40]:
            print(f"{us:9.1f} us {c[name]:7.1f} calls  {100 * us / total:5.1f} %  {name[:150]}")
        return
    bt, bc = census(sys.argv[3], tokens)
    print(f"baseline:              {sum(bt.values()):.1f} us over {sum(bc.values()):.0f} kernels")
    names = set(t) | set(bt)
    print(f"{'this':>10} {'base':>10} {'change':>10}  calls (this/base)  kernel")
    for name in sorted(names, key=lambda n: -abs(t.get(n, 0.0) - bt.get(n, 0.0)))[:40]:
        a, b = t.get(name, 0.0), bt.get(name, 0.0)
        print(f"{a:10.1f} {b:10.1f} {a - b:+10.1f}  {c.get(name, 0):6.1f}/{bc.get(name, 0):<6.1f}  {name[:130]}")


if __name__ == "__main__":
    try:
        main()
    except BrokenPipeError:  # piped into head
        pass
