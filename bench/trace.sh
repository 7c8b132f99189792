#!/usr/bin/env bash
# holter trace against bpftrace, measured in the same run (as root):
#  1. added cost per event on a syscall loop for two queries — count by
#     comm, and a log2 histogram of an argument — as the median over
#     ROUNDS interleaved runs of (untraced, holter, bpftrace) of the ns per
#     call above the untraced run;
#  2. time from the command to its probes being attached, and peak RSS.
# Prints ratios holter/bpftrace; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
CALLS=${CALLS:-2000000}
work=$(mktemp -d)
tracer=""
trap '[ -n "$tracer" ] && kill $tracer 2>/dev/null; rm -rf "$work"' EXIT
command -v bpftrace >/dev/null || { echo "bpftrace is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
go build -o "$work/holter" ./cmd/holter
gcc -O2 -o "$work/calls" bench/workloads/syscall_calls.c

# wait_for FILE PATTERN: until the tracer's output says it is attached.
wait_for() { for _ in $(seq 1 500); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.01; done; echo "no '$2' in $1" >&2; cat "$1" >&2; exit 1; }

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }

cost() { # name mode holter-query bpftrace-script
	local name=$1 mode=$2 hq=$3 bs=$4 base h b
	: >"$work/dh"; : >"$work/db"
	for _ in $(seq 1 "$ROUNDS"); do
		base=$("$work/calls" "$mode" "$CALLS")
		"$work/holter" trace --local --verbose --interval 10s "$hq" >/dev/null 2>"$work/h.err" & tracer=$!
		wait_for "$work/h.err" "probes attached"
		h=$("$work/calls" "$mode" "$CALLS"); kill -INT $tracer; wait $tracer || true; tracer=""
		bpftrace -e "$bs" >"$work/b.out" 2>&1 & tracer=$!
		wait_for "$work/b.out" "Attaching"; sleep 0.2
		b=$("$work/calls" "$mode" "$CALLS"); kill -INT $tracer; wait $tracer || true; tracer=""
		echo "$h - $base" | bc -l >>"$work/dh"
		echo "$b - $base" | bc -l >>"$work/db"
	done
	local mh mb
	mh=$(median <"$work/dh"); mb=$(median <"$work/db")
	printf "%-28s holter +%6.1f ns/event  bpftrace +%6.1f ns/event  ratio holter/bpftrace %.2f  (spread holter %s..%s, bpftrace %s..%s)\n" \
		"$name" "$mh" "$mb" "$(echo "$mh / $mb" | bc -l)" "$(sort -g "$work/dh" | head -1)" "$(sort -g "$work/dh" | tail -1)" "$(sort -g "$work/db" | head -1)" "$(sort -g "$work/db" | tail -1)"
}

echo "== added cost per event, median of $ROUNDS interleaved rounds of $CALLS calls"
cost "count by comm (getpid)" getpid \
	"SELECT comm, count() FROM syscall.getpid GROUP BY comm" \
	'tracepoint:syscalls:sys_enter_getpid { @[comm] = count(); }'
cost "hist of an argument" getpriority \
	"SELECT hist(who) FROM syscall.getpriority" \
	'tracepoint:syscalls:sys_enter_getpriority { @ = hist(args->who); }'

echo "== time from command to attached probes, and peak RSS (median of $ROUNDS)"
: >"$work/th"; : >"$work/tb"; : >"$work/rh"; : >"$work/rb"
for _ in $(seq 1 "$ROUNDS"); do
	s=$(date +%s%N)
	/usr/bin/time -f "%M" -o "$work/rss_h" "$work/holter" trace --local --verbose --for 1s "SELECT comm, count() FROM syscall.getpid GROUP BY comm" >/dev/null 2>"$work/h.err" & tracer=$!
	wait_for "$work/h.err" "probes attached"; echo $(( ($(date +%s%N) - s) / 1000000 )) >>"$work/th"
	wait $tracer; tracer=""; cat "$work/rss_h" >>"$work/rh"
	s=$(date +%s%N)
	/usr/bin/time -f "%M" -o "$work/rss_b" bpftrace -e 'tracepoint:syscalls:sys_enter_getpid { @[comm] = count(); } interval:s:1 { exit(); }' >"$work/b.out" 2>&1 & tracer=$!
	wait_for "$work/b.out" "Attaching"; echo $(( ($(date +%s%N) - s) / 1000000 )) >>"$work/tb"
	wait $tracer; tracer=""; cat "$work/rss_b" >>"$work/rb"
done
th=$(median <"$work/th"); tb=$(median <"$work/tb"); rh=$(median <"$work/rh"); rb=$(median <"$work/rb")
printf "start to attached: holter %d ms, bpftrace %d ms (bpftrace prints 'Attaching' before attaching), ratio %.2f\n" "$th" "$tb" "$(echo "$th / $tb" | bc -l)"
printf "peak RSS (1 s run): holter %d MB, bpftrace %d MB, ratio %.2f\n" $((rh / 1024)) $((rb / 1024)) "$(echo "$rh / $rb" | bc -l)"
