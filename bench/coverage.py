"""Scores bench/coverage.sh's recording: false negatives per vital."""
import csv
import math
import os
import sys
from bisect import bisect_right

work = sys.argv[1]
MARGIN = 50_000_000  # ns kept clear of epoch boundaries

epochs = sorted((int(r["start_ns"]), int(r["end_ns"]), int(r["epoch"]))
                for r in csv.DictReader(open(os.path.join(work, "epochs.csv"))))
starts = [e[0] for e in epochs]
copy_of = {}
for line in open(os.path.join(work, "pids")):
    copy, pid = line.split()
    copy_of[pid] = copy

# the labels each rare copy provokes, and how a sample is recognised as one
checks = {
    "syscall": lambda r: r["vital"] == "syscall" and r["syscall_nr"] == "110",  # getppid
    "signal": lambda r: r["vital"] == "signal" and r["signal"] == "10",
    "sock send": lambda r: r["vital"] == "sock" and r["direction"] == "send",
    "sock recv": lambda r: r["vital"] == "sock" and r["direction"] == "recv",
    "umem": lambda r: r["vital"] == "umem",
    "kmem": lambda r: r["vital"] == "kmem",
    "blck": lambda r: r["vital"] == "blck",
    "blio": lambda r: r["vital"] == "blio",
}
seen = {name: set() for name in checks}
for r in csv.DictReader(open(os.path.join(work, "samples.csv"))):
    copy = copy_of.get(r["pid"])
    if copy is None:
        continue
    for name, ok in checks.items():
        if ok(r):
            seen[name].add((copy, int(r["epoch"])))

trials = set()
skipped = 0
for pid, copy in copy_of.items():
    for line in open(os.path.join(work, "logs", copy)):
        t0, t1 = map(int, line.split())
        i = bisect_right(starts, t0) - 1
        if i < 0 or not (epochs[i][0] + MARGIN <= t0 and t1 + MARGIN <= epochs[i][1]):
            skipped += 1
            continue
        trials.add((copy, epochs[i][2]))


def upper95(misses, n):
    """One-sided 95% upper bound on a binomial rate (Clopper-Pearson)."""
    if n == 0:
        return float("nan")
    lo, hi = misses / n, 1.0
    for _ in range(60):
        p = (lo + hi) / 2
        # in logs: math.comb(n, k) overflows a float once misses are many
        cdf = sum(math.exp(math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                           + k * math.log(p) + (n - k) * math.log1p(-p)) for k in range(misses + 1))
        lo, hi = (p, hi) if cdf > 0.05 else (lo, p)
    return hi


print(f"{len(trials)} label-epochs with ground truth ({skipped} near an epoch boundary not counted), "
      f"{len(epochs)} epochs, {len(copy_of)} rare labels per vital")
print(f"{'vital':10} {'trials':>7} {'missed':>7} {'FN rate':>9} {'95% upper':>10}")
for name in checks:
    miss = sum(1 for t in trials if t not in seen[name])
    print(f"{name:10} {len(trials):7d} {miss:7d} {miss / max(len(trials), 1):9.2e} {upper95(miss, len(trials)):10.2e}")
print("losses counted by the recorder over the run (vital, ring buffer, state, epochs):")
for r in csv.DictReader(open(os.path.join(work, "lost.csv"))):
    print(f"  {r['vital']:8} {r['lost_ringbuf']:>8} {r['lost_state']:>8} {r['epochs']:>6}")
