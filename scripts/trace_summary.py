#!/usr/bin/env python3
"""Where a graph-replayed step's time goes, from tools/cupti_trace's kernel timeline.

usage: trace_summary.py TRACE_CSV [--graph ID] [--skip N] [--replays N] [--list]

Kernels of a CUDA graph replay overlap: every hf2q kernel is a programmatic dependent
launch (it starts while its predecessor runs and waits inside), and decode runs two
chains on two streams. So a kernel's start-to-end time says little; what it costs the
step is how far it moves the step's end. For each replay the kernels are taken in order
of their end, and each is charged `end - (latest end before it)`: the time during which
it was the kernel the step waited for. These charges sum to the replay's span. Per
stream, a kernel is also charged `end - (the previous end on its stream)`: its cost to
its own chain.

Prints, for the graph with the most replays (or --graph), per kernel name: calls a
replay, the critical-path charge (µs a replay and share), the chain charge and the
start-to-end time; then the replay span and the period between replay starts (the
difference is host time between steps). Where the trace holds the runtime calls (the
tool writes them as "api:" lines), the GPU's idle time between replays is split at the
cudaGraphLaunch call: the host's turn (the previous replay's last kernel to the call) and
the launch (the call to the replay's first kernel), and the wait's wake-up (the last
kernel to the end of the synchronising call the host was blocked in) is shown too.
--list prints one replay kernel by kernel.
"""
import argparse
import csv
import re
from collections import defaultdict


def short(name: str) -> str:
    name = re.sub(r"^void ", "", name)
    name = name.replace("(anonymous namespace)::", "").replace("hf2q::cuda::", "").replace("hf2q::", "")
    return name[:110]


def load(path):
    rows = []
    with open(path, errors="replace") as f:
        for r in csv.DictReader(f):
            try:
                rows.append((int(r["start_ns"]), int(r["end_ns"]), int(r["stream"]), int(r["graph"]),
                             int(r["node"]), r["grid"], r["block"], short(r["name"])))
            except (KeyError, ValueError):
                continue
    rows.sort()
    return rows


def replays_of(rows, graph):
    """Splits one graph's kernels into replays: a replay ends where a node repeats."""
    out, cur, seen = [], [], set()
    for r in rows:
        if r[3] != graph:
            continue
        if r[4] in seen:
            out.append(cur)
            cur, seen = [], set()
        cur.append(r)
        seen.add(r[4])
    if cur:
        out.append(cur)
    return out


def charges(rep):
    """The replay's kernels in order of their end, each with its critical-path charge
    and its charge to its own stream's chain (ns)."""
    last, last_on = min(r[0] for r in rep), {}
    for r in sorted(rep, key=lambda r: r[1]):
        crit = max(0, r[1] - last)
        last = max(last, r[1])
        chain = r[1] - last_on.get(r[2], r[0])
        last_on[r[2]] = r[1]
        yield r, crit, chain


def host_turn(rows, all_reps, reps):
    """Prints the idle time between consecutive replays, split at the graph launch call."""
    api = [r for r in rows if r[5] == "api"]
    launches = sorted(r[0] for r in api if r[7] == "api:cudaGraphLaunch")
    waits = sorted((r[1], r[0]) for r in api if "Synchronize" in r[7] or r[7].startswith("api:cudaMemcpy"))
    if not launches:
        return
    chosen = {id(rep) for rep in reps}
    idle, host, launch, wake = [], [], [], []
    for prev, rep in zip(all_reps, all_reps[1:]):
        if id(rep) not in chosen:
            continue
        end, start = max(r[1] for r in prev), min(r[0] for r in rep)
        call = [t for t in launches if t <= start]
        if not call or start < end:
            continue
        idle.append(start - end)
        host.append(call[-1] - end)
        launch.append(start - call[-1])
        woke = [e for e, s0 in waits if e >= end and s0 <= end]
        if woke:
            wake.append(woke[0] - end)
    if not idle:
        return
    mean = lambda v: sum(v) / len(v) / 1e3
    print(f"between replays ({len(idle)}): GPU idle {mean(idle):.1f} µs = host {mean(host):.1f} "
          f"(last kernel -> cudaGraphLaunch call) + launch {mean(launch):.1f} (call -> first kernel)"
          + (f"; the host's wait returned {mean(wake):.1f} µs after the last kernel" if wake else ""))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--graph", type=int)
    ap.add_argument("--skip", type=int, default=2, help="replays skipped at the start (warm-up)")
    ap.add_argument("--replays", type=int, default=50)
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    rows = load(a.trace)
    graphs = defaultdict(int)
    for r in rows:
        if r[3]:
            graphs[r[3]] += 1
    if not graphs:
        print("no graph kernels in the trace")
        return
    by_replays = {g: len(replays_of(rows, g)) for g in graphs}
    print("graphs (id: kernels, replays):",
          ", ".join(f"{g}: {graphs[g]}, {by_replays[g]}" for g in sorted(graphs, key=lambda g: -graphs[g])[:8]))
    graph = a.graph if a.graph is not None else max(by_replays, key=lambda g: (by_replays[g], graphs[g]))
    all_reps = replays_of(rows, graph)
    reps = all_reps
    sizes = defaultdict(int)
    for rep in reps:
        sizes[len(rep)] += 1
    full = max(sizes, key=lambda n: (sizes[n], n))
    reps = [rep for rep in reps if len(rep) == full][a.skip:a.skip + a.replays]
    if not reps:
        print("no complete replays after --skip")
        return
    crit, chain, dur, calls = defaultdict(float), defaultdict(float), defaultdict(float), defaultdict(int)
    spans, starts = [], []
    for rep in reps:
        t0 = min(r[0] for r in rep)
        starts.append(t0)
        spans.append(max(r[1] for r in rep) - t0)
        for r, c, ch in charges(rep):
            crit[r[7]] += c
            chain[r[7]] += ch
            dur[r[7]] += r[1] - r[0]
            calls[r[7]] += 1
    n = len(reps)
    span = sum(spans) / n
    periods = [b - a_ for a_, b in zip(starts, starts[1:])]
    print(f"graph {graph}: {n} replays of {full} kernels; span {span / 1e3:.1f} µs"
          + (f", period {sum(periods) / len(periods) / 1e3:.1f} µs" if periods else ""))
    print(f"{'critical µs':>11} {'share':>6} {'chain µs':>9} {'start-end µs':>12} {'calls':>6}  kernel")
    for k in sorted(crit, key=lambda k: -crit[k]):
        print(f"{crit[k] / n / 1e3:11.1f} {100 * crit[k] / n / span:5.1f}% {chain[k] / n / 1e3:9.1f} "
              f"{dur[k] / n / 1e3:12.1f} {calls[k] / n:6.0f}  {k}")
    host_turn(rows, all_reps, reps)
    if a.list:
        rep = reps[-1]
        t0 = min(r[0] for r in rep)
        print("\none replay, by end: end µs, critical charge, chain charge, start-end, stream, grid x block, kernel")
        for r, c, ch in charges(rep):
            print(f"{(r[1] - t0) / 1e3:8.1f} {c / 1e3:6.1f} {ch / 1e3:6.1f} {(r[1] - r[0]) / 1e3:6.1f} "
                  f"{r[2]:3d} {r[5]:>10}x{r[6]:<4} {r[7]}")


if __name__ == "__main__":
    main()
