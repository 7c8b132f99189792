"""Summarises bench/percost.sh: ns per run of each vital's programs and of
the empty program on the same hook, per workload, summed over the rounds."""
import collections
import sys

work, rounds = sys.argv[1], int(sys.argv[2])
hooks = {}  # program -> (vital, hook)
for line in open(f"{work}/hooks"):
    vital, prog, hook = line.split()
    hooks.setdefault(prog, (vital, hook))
# programs of earlier recorders (HOLTER_BIN=...), for before/after figures
for prog, vital, hook in [("vital_sys_enter", "syscall", "sys_enter"),
                          ("vital_sched_wakeup", "sched", "sched_wakeup"),
                          ("vital_sched_wakeup_new", "sched", "sched_wakeup_new")]:
    hooks.setdefault(prog, (vital, hook))


def stats(path):
    out = {}
    for line in open(path):
        name, runs, ns = line.split("\t")
        out[name] = (int(runs), int(ns))
    return out


for w in ("storms", "churn"):
    ours = collections.Counter()
    ours_ns = collections.Counter()
    floor = collections.Counter()
    floor_ns = collections.Counter()
    for i in range(1, rounds + 1):
        a, b = stats(f"{work}/holter0.{w}.{i}"), stats(f"{work}/holter1.{w}.{i}")
        for prog, (runs, ns) in b.items():
            r0, n0 = a.get(prog, (0, 0))
            ours[prog] += runs - r0
            ours_ns[prog] += ns - n0
        for hook, (runs, ns) in stats(f"{work}/floor.{w}.{i}").items():
            floor[hook] += runs
            floor_ns[hook] += ns
    print(f"workload {w} ({rounds} rounds): ns per run by the kernel's statistics")
    print(f"  {'vital':8} {'program':24} {'hook':18} {'runs':>10} {'holter':>8} {'floor':>8} {'ratio':>6}")
    per_vital = collections.defaultdict(lambda: [0, 0, 0, 0])
    for prog in sorted(ours, key=lambda p: hooks.get(p, ("?", p))):
        if prog not in hooks or not ours[prog]:
            continue  # not a vital's (the account programs), or never ran
        vital, hook = hooks[prog]
        runs, ns = ours[prog], ours_ns[prog]
        fr, fns = floor.get(hook, 0), floor_ns.get(hook, 0)
        h = ns / runs if runs else float("nan")
        f = fns / fr if fr else float("nan")
        print(f"  {vital:8} {prog:24} {hook:18} {runs:10d} {h:8.1f} {f:8.1f} {h / f if fr and runs else float('nan'):6.2f}")
        v = per_vital[vital]
        v[0] += runs
        v[1] += ns
        v[2] += fr
        v[3] += fns
    print("  per vital, all its programs' runs together:")
    for vital, (r, ns, fr, fns) in per_vital.items():
        if r and fr:
            print(f"  {vital:8} {r:10d} runs  holter {ns / r:7.1f} ns  floor {fns / fr:7.1f} ns  ratio {ns / r / (fns / fr):5.2f}")
