#!/usr/bin/env bash
# Per-event cost of each vital's BPF programs, by the kernel's own run-time
# statistics (kernel.bpf_stats_enabled=1 while it runs; restored after),
# against the floor: an empty program on the same hook (bench/bpfcost
# floor), attached at the same time, so both see the same events. The
# recorder runs at defaults but for the budget (off: its throttling would
# change what is measured). Two workloads, one after the other, each ROUNDS
# times:
#   storms: bench/workloads/lat.c's rows getpid, read, page fault, signal
#          handler, context switch, pipe latency, fork+exit, each a storm of
#          one operation for SECS/7 seconds on the last CPU at real-time
#          priority, so that it, and not the machine's other work, makes
#          most of the events (the heavy hitters of Table 1)
#   churn: stress-ng --cpu 1 --fork 1 --hdd 1 --sock 1 --switch 1 (new
#          processes, new labels, all the time)
# Prints ns per run of each program (the statistics' own clock reads
# included, in both columns), and their ratio. Asserts nothing. Run as root.
#   ROUNDS=3 SECS=21 bench/percost.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-21}
command -v stress-ng >/dev/null || { echo "percost: needs stress-ng" >&2; exit 1; }
gcc -O2 -o "$work/lat" bench/workloads/lat.c
go build -o "$work/bpfcost" ./bench/bpfcost
"$work/bpfcost" hooks >"$work/hooks"
stats_was=$(cat /proc/sys/kernel/bpf_stats_enabled)
trap 'echo "$stats_was" >/proc/sys/kernel/bpf_stats_enabled; stop_recorder; stop_floor >/dev/null; remove_work' EXIT
echo 1 >/proc/sys/kernel/bpf_stats_enabled

run_workload() {
	case $1 in
	storms)
		for row in getpid read "page fault" "signal handler" "context switch" "pipe latency" fork+exit; do
			chrt -f 10 taskset -c "$(($(nproc) - 1))" "$work/lat" storm "$(awk -v s="$SECS" 'BEGIN {print s / 7}')" "$row"
		done ;;
	churn) stress-ng --cpu 1 --fork 1 --hdd 1 --sock 1 --switch 1 --timeout "${SECS}s" --temp-path "$work" >/dev/null 2>&1 ;;
	esac
}

for i in $(seq "$ROUNDS"); do
	for w in storms churn; do
		start_floor
		start_recorder "$work/data" --budget off
		"$work/bpfcost" stats "$rec" >"$work/holter0.$w.$i"
		run_workload $w
		"$work/bpfcost" stats "$rec" >"$work/holter1.$w.$i"
		stop_recorder
		stop_floor >"$work/floor.$w.$i"
		rm -rf "$work/data"
		[ "$(cat /proc/sys/kernel/bpf_stats_enabled)" = 1 ] || echo "percost: kernel.bpf_stats_enabled was turned off meanwhile; figures of round $i are short" >&2
		echo "round $i/$ROUNDS $w done" >&2
	done
done
python3 bench/percost.py "$work" "$ROUNDS"
