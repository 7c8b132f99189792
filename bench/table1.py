"""Summarises bench/table1.sh's rounds: each row's time per operation
unmonitored, and the slowdown of the floor and of holter against the same
round's unmonitored run, as median (min … max) over the rounds; the row's
bar; and the median row. Times are elapsed (TIME=wall) or CPU (TIME=cpu),
as bench/workloads/lat.c prints them."""
import statistics
import sys

work, rounds, which = sys.argv[1], int(sys.argv[2]), sys.argv[3]
column = {"wall": 1, "cpu": 2}[which]


def read(config, i):
    out = {}
    for line in open(f"{work}/{config}.{i}"):
        fields = line.rstrip("\n").split("\t")
        out[fields[0]] = float(fields[column])
    return out


runs = {c: [read(c, i) for i in range(1, rounds + 1)] for c in ("none", "floor", "holter")}
rows = list(runs["none"][0])


def slowdowns(config, row):
    return [100 * (r[row] / n[row] - 1) for r, n in zip(runs[config], runs["none"])]


def spread(xs):
    return f"{statistics.median(xs):+6.1f}% ({min(xs):+.1f} … {max(xs):+.1f})"


print(f"{rounds} rounds, {which} time per operation; slowdown against the same round's unmonitored run, median (min … max)")
print(f"{'test':18} {'none µs':>10} {'floor':>26} {'holter':>26} {'bar':>6}")
medians = []
for row in rows:
    fl, ho = slowdowns("floor", row), slowdowns("holter", row)
    bar = max(10.0, 1.5 * statistics.median(fl))
    m = statistics.median(ho)
    medians.append(m)
    base = statistics.median(n[row] for n in runs["none"])
    print(f"{row:18} {base:10.4f} {spread(fl):>26} {spread(ho):>26} {bar:5.1f}% {'within' if m <= bar else 'OVER'}")
print(f"median row slowdown with holter: {statistics.median(medians):+.1f}% (bar 3%); "
      f"floor: {statistics.median(statistics.median(slowdowns('floor', r)) for r in rows):+.1f}%")
