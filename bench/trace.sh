#!/usr/bin/env bash
# holter trace against bpftrace, measured in the same run (as root), over
# ROUNDS interleaved rounds (holter, then bpftrace, each round), for the
# same queries:
#  1. time from the command to its first attached probe, and peak RSS of a
#     run of HOLD seconds, for an aggregating tracepoint query and an
#     aggregating uprobe query (libc's malloc): bench/workloads/tracer_start.c
#     runs either tracer the same way, polls its perf events until one has
#     a BPF program on it (BPF_TASK_FD_QUERY, what bpftool perf lists),
#     SIGINTs it HOLD s later and reads its peak RSS from wait4;
#  2. added cost per event on a syscall loop for two queries — count by
#     comm, and an entry/exit latency histogram (a begin kept per thread
#     until its end: bpftrace's @start[tid] pattern) — as ns per call
#     above an untraced run of the same loop in the same round.
# Prints medians with their spread (min..max over the rounds) and the
# ratio holter/bpftrace of each round (median and spread); asserts nothing.
# HOLTER_TRACE_TIMING shows where holter's start goes (printed once).
# HOLTER_BIN=PATH measures that holter binary instead of building this tree
# (e.g. an older commit's, for a before/after comparison).
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-7}
CALLS=${CALLS:-2000000}
HOLD=${HOLD:-1}
[ "$ROUNDS" -ge 5 ] || { echo "ROUNDS must be at least 5" >&2; exit 2; }
work=$(mktemp -d)
tracer=""
trap '[ -n "$tracer" ] && kill $tracer 2>/dev/null; rm -rf "$work"' EXIT
command -v bpftrace >/dev/null || { echo "bpftrace is not installed (scripts/setup.sh installs it)" >&2; exit 1; }
mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
if [ -n "${HOLTER_BIN:-}" ]; then cp "$HOLTER_BIN" "$work/holter.built"; else go build -o "$work/holter.built" ./cmd/holter; fi
# Installed as a package would be (written with write(2)), like bpftrace:
# the file the linker wrote through a shared mapping sits in the page
# cache in large folios that are mapped whole, which adds about 5 MB to
# the RSS of any holter command started from it.
install -m 755 "$work/holter.built" "$work/holter"
gcc -O2 -o "$work/calls" bench/workloads/syscall_calls.c
gcc -O2 -o "$work/start" bench/workloads/tracer_start.c

median() { sort -g | awk '{a[NR]=$1} END {print (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}'; }
spread() { sort -g "$1" | awk 'NR==1{lo=$1} {hi=$1} END {printf "%s..%s", lo, hi}'; }
# report NAME UNIT HOLTER-FILE BPFTRACE-FILE: medians, spreads and the
# per-round ratios.
report() {
	paste "$3" "$4" | awk '{ if ($2 != 0) printf "%.3f\n", $1 / $2 }' >"$work/ratio"
	printf "%-34s holter %8.2f %-2s (%s)  bpftrace %8.2f %-2s (%s)  holter/bpftrace %.3f (%s)\n" "$1" \
		"$(median <"$3")" "$2" "$(spread "$3")" "$(median <"$4")" "$2" "$(spread "$4")" \
		"$(median <"$work/ratio")" "$(spread "$work/ratio")"
}

libc=$(ldconfig -p | awk '/libc\.so\.6 .*x86-64/ {print $NF; exit}')
starts() { # name holter-query bpftrace-script
	local name=$1 hq=$2 bs=$3 t r
	: >"$work/th"; : >"$work/tb"; : >"$work/rh"; : >"$work/rb"
	for _ in $(seq 1 "$ROUNDS"); do
		read -r t r < <("$work/start" run "$HOLD" "$work/holter" trace --local "$hq")
		echo "$t" >>"$work/th"; echo "$((r / 1024))" >>"$work/rh"
		read -r t r < <("$work/start" run "$HOLD" bpftrace -e "$bs")
		echo "$t" >>"$work/tb"; echo "$((r / 1024))" >>"$work/rb"
	done
	report "$name: time to attached" ms "$work/th" "$work/tb"
	report "$name: peak RSS" MB "$work/rh" "$work/rb"
}
echo "== start: exec to first attached probe, and peak RSS of a ${HOLD}-s run; $ROUNDS interleaved rounds"
starts "tracepoint" "SELECT comm, count() FROM syscall.getpid GROUP BY comm" \
	'tracepoint:syscalls:sys_enter_getpid { @[comm] = count(); }'
starts "uprobe" "SELECT comm, count() FROM uprobe.\"$libc\".malloc GROUP BY comm" \
	"uprobe:$libc:malloc { @[comm] = count(); }"
# Sorted and cut in user space (holter started DuckDB for it before its
# own evaluator).
starts "top 5 by count" "SELECT comm, count() AS n FROM syscall.getpid GROUP BY comm ORDER BY n DESC LIMIT 5" \
	'tracepoint:syscalls:sys_enter_getpid { @[comm] = count(); } END { print(@, 5); clear(@); }'
: >"$work/tv"; : >"$work/rv"
for _ in $(seq 1 "$ROUNDS"); do
	read -r t r < <("$work/start" exit "$work/holter" version)
	echo "$t" >>"$work/tv"; echo "$((r / 1024))" >>"$work/rv"
done
printf "%-34s %8.2f ms (%s), peak RSS %d MB (%s)\n" "floor: holter version, exec to exit" \
	"$(median <"$work/tv")" "$(spread "$work/tv")" "$(median <"$work/rv")" "$(spread "$work/rv")"
echo "holter's start, one run (HOLTER_TRACE_TIMING):"
HOLTER_TRACE_TIMING=$(date +%s%N) "$work/holter" trace --local --for 1ms "SELECT comm, count() FROM syscall.getpid GROUP BY comm" 2>&1 >/dev/null | sed 's/^/   /'

# stop PID: SIGINT, again every 3 s until it ends (bpftrace 0.17 on a
# loaded machine sometimes misses one that comes soon after it attached).
stop() {
	kill -INT "$1"
	for i in $(seq 1 3000); do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.01
		[ $((i % 300)) -ne 0 ] || kill -INT "$1"
	done
	wait "$1" || true
}

cost() { # name mode holter-query bpftrace-script
	local name=$1 mode=$2 hq=$3 bs=$4 base h b
	: >"$work/dh"; : >"$work/db"
	for _ in $(seq 1 "$ROUNDS"); do
		base=$("$work/calls" "$mode" "$CALLS")
		"$work/holter" trace --local --interval 10s "$hq" >/dev/null 2>"$work/h.err" & tracer=$!
		"$work/start" wait $tracer || { cat "$work/h.err" >&2; exit 1; }
		sleep 0.2 # a query of two probes: both attached
		h=$("$work/calls" "$mode" "$CALLS"); stop $tracer; tracer=""
		bpftrace -e "$bs" >"$work/b.out" 2>&1 & tracer=$!
		"$work/start" wait $tracer || { cat "$work/b.out" >&2; exit 1; }
		sleep 0.2
		b=$("$work/calls" "$mode" "$CALLS"); stop $tracer; tracer=""
		echo "$h - $base" | bc -l >>"$work/dh"
		echo "$b - $base" | bc -l >>"$work/db"
	done
	report "$name" ns "$work/dh" "$work/db"
}

echo "== added cost per event: ns per call above the untraced loop, $ROUNDS interleaved rounds of $CALLS calls"
cost "count by comm (getpid)" getpid \
	"SELECT comm, count() FROM syscall.getpid GROUP BY comm" \
	'tracepoint:syscalls:sys_enter_getpid { @[comm] = count(); }'
cost "entry/exit latency hist (getpid)" getpid \
	"SELECT hist(latency) FROM syscall.getpid" \
	'tracepoint:syscalls:sys_enter_getpid { @s[tid] = nsecs; }
	 tracepoint:syscalls:sys_exit_getpid /@s[tid]/ { @ = hist(nsecs - @s[tid]); delete(@s[tid]); }'
