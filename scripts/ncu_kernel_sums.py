#!/usr/bin/env python3
"""Sums Nsight Compute's gpu__time_duration per kernel name from its --csv output.

usage: ncu_kernel_sums.py NCU_CSV_LOG TOKENS
Prints, per kernel (template arguments dropped), the calls and microseconds per
decode token, largest first, and the total kernel time per token.
"""
import csv
import re
import sys
from collections import defaultdict


def main() -> None:
    path, tokens = sys.argv[1], float(sys.argv[2])
    lines = [l for l in open(path, errors="replace") if l.startswith('"')]
    rows = csv.DictReader(lines)
    time_us = defaultdict(float)
    calls = defaultdict(int)
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = r["Kernel Name"]
        name = re.sub(r"\(.*", "", name)
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "ns")
        scale = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3}.get(unit, 1e-3)
        time_us[name] += v * scale
        calls[name] += 1
    total = sum(time_us.values())
    print(f"kernel time per token: {total / tokens:.1f} us over {sum(calls.values()) / tokens:.0f} kernels")
    for name, t in sorted(time_us.items(), key=lambda kv: -kv[1])[:40]:
        print(f"{t / tokens:9.1f} us {calls[name] / tokens:7.1f} calls  {100 * t / total:5.1f} %  {name[:150]}")


if __name__ == "__main__":
    main()
