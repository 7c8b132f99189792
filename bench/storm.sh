#!/usr/bin/env bash
# The budget under a storm: one CPU making system calls (getpid), context
# switches (two processes passing a byte on one CPU), page faults (mapping,
# touching and unmapping anonymous pages) or processes (stress-ng --fork)
# as fast as it can, with `holter record` at defaults (all vitals, budget
# BUDGET, 1% unless set). For every 1-s window of the storm it prints the
# monitor's CPU as a share of the machine: the recorder process's CPU time
# (all its threads) plus its programs' run time by the kernel's statistics
# (kernel.bpf_stats_enabled=1 while it runs; restored after) less their own
# clock reads, which only measuring costs (an empty program on every hook,
# bench/bpfcost floor, attached meanwhile, gives them per run); and the
# raw run time beside. Then the samples each vital lost (ring buffer full)
# over the storm. Asserts nothing. Run as root.
#   STORMS="syscall ctxsw fault fork" SECS=10 bench/storm.sh
source "$(dirname "$0")/lib.sh"
STORMS=${STORMS:-syscall ctxsw fault fork}
SECS=${SECS:-10}
BUDGET=${BUDGET:-1%}
ncpu=$(nproc)
cpu=$((ncpu - 1))
gcc -O2 -o "$work/lat" bench/workloads/lat.c
go build -o "$work/bpfcost" ./bench/bpfcost
stats_was=$(cat /proc/sys/kernel/bpf_stats_enabled)
trap 'echo "$stats_was" >/proc/sys/kernel/bpf_stats_enabled; stop_recorder; stop_floor >/dev/null; remove_work' EXIT
echo 1 >/proc/sys/kernel/bpf_stats_enabled

storm() {
	case $1 in
	syscall) taskset -c "$cpu" "$work/lat" storm "$SECS" getpid ;;
	ctxsw) taskset -c "$cpu" "$work/lat" storm "$SECS" "context switch" ;;
	fault) taskset -c "$cpu" "$work/lat" storm "$SECS" "page fault" ;;
	fork) stress-ng --fork 1 --taskset "$cpu" --timeout "${SECS}s" >/dev/null 2>&1 ;;
	esac
}

# sample: "seconds recorder_cpu_ns holter_runs holter_run_ns floor_runs floor_run_ns"
sample() {
	local cpu_ns
	cpu_ns=$(cat /proc/"$rec"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s + 0}')
	"$work/bpfcost" stats "$rec" | awk -v t="$(date +%s.%N)" -v c="$cpu_ns" -v f="$("$work/bpfcost" stats "$floor" | awk '{r += $2; n += $3} END {print r + 0, n + 0}')" \
		'{r += $2; n += $3} END {print t, c, r + 0, n + 0, f}'
}

for s in $STORMS; do
	data="$work/data-$s"
	start_floor
	start_recorder "$data" --budget "$BUDGET"
	sleep 2
	storm "$s" >/dev/null &
	storm_pid=$!
	: >"$work/samples.$s"
	while kill -0 "$storm_pid" 2>/dev/null; do
		sample >>"$work/samples.$s"
		sleep 1
	done
	wait "$storm_pid" || true
	stop_recorder
	stop_floor >/dev/null
	"$work/holter" query --data "$data" --format csv \
		"SELECT vital, sum(events) AS events, sum(samples) AS samples, sum(lost_ringbuf) AS lost_ringbuf FROM vitals GROUP BY vital ORDER BY vital" >"$work/lost.$s"
	echo "storm $s done" >&2
done

python3 - "$work" "$ncpu" "$STORMS" "$BUDGET" <<'PY'
import csv, sys
work, ncpu, storms, budget = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4]
for s in storms:
    rows = [list(map(float, l.split())) for l in open(f"{work}/samples.{s}") if l.strip()]
    print(f"storm {s} (budget {budget} of the machine): monitor CPU per 1-s window, % of the machine")
    print(f"  {'window':>6} {'process':>8} {'BPF':>8} {'total':>8} {'BPF raw':>8}")
    for i, (a, b) in enumerate(zip(rows, rows[1:])):
        wall = (b[0] - a[0]) * 1e9 * ncpu
        proc = (b[1] - a[1]) / wall * 100
        runs, raw = b[2] - a[2], b[3] - a[3]
        fr, fn = b[4] - a[4], b[5] - a[5]
        clock = fn / fr if fr else 0
        bpf = max(raw - runs * clock, 0) / wall * 100
        print(f"  {i + 1:>6} {proc:8.2f} {bpf:8.2f} {proc + bpf:8.2f} {raw / wall * 100:8.2f}")
    print("  samples lost over the run (vital, events, samples, lost to a full ring buffer):")
    for r in csv.DictReader(open(f"{work}/lost.{s}")):
        print(f"    {r['vital']:8} {r['events']:>12} {r['samples']:>8} {r['lost_ringbuf']:>8}")
PY
