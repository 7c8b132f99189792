#!/usr/bin/env bash
# The idle cost of online analysis (internal/incident's Online): the
# recorder's own CPU time (utime + stime from /proc/PID/stat) as a share of
# the machine, at the default epoch (EPOCH, 1m) with --online=true and
# --online=false, in ROUNDS interleaved pairs of SECS seconds each (after
# WARM seconds of start-up: attaching, the first symbolization, the first
# epoch's analysis of the kernel's symbols), and the ratio with/without.
# With OLD=path/to/holter, that build (say, main's) is measured in the same
# rounds with its online analysis on. Prints figures; asserts nothing.
#
#   sudo bench/online.sh                 (ROUNDS=2 SECS=300 WARM=90)
#   sudo OLD=/tmp/holter-main bench/online.sh
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-2}
SECS=${SECS:-300}
WARM=${WARM:-90}
EPOCH=${EPOCH:-1m}
work=$(mktemp -d)
rec=""
trap '[ -n "$rec" ] && kill $rec 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/holter" ./cmd/holter
ncpu=$(nproc)
hz=$(getconf CLK_TCK)

# cpu PID prints the process's utime + stime in clock ticks.
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# run BINARY ONLINE prints the recorder's CPU as a percentage of the
# machine over SECS seconds after WARM.
run() {
	rm -rf "$work/data"
	"$1" record --data "$work/data" --epoch "$EPOCH" --api "" --online="$2" 2>"$work/rec.log" &
	rec=$!
	sleep "$WARM"
	local a b
	a=$(cpu $rec)
	sleep "$SECS"
	b=$(cpu $rec)
	kill -INT $rec
	wait $rec || true
	rec=""
	awk -v a="$a" -v b="$b" -v hz="$hz" -v s="$SECS" -v n="$ncpu" 'BEGIN{printf "%.3f", (b - a) / hz / s / n * 100}'
}
with=()
without=()
old=()
for i in $(seq "$ROUNDS"); do
	w=$(run "$work/holter" true)
	wo=$(run "$work/holter" false)
	with+=("$w")
	without+=("$wo")
	line="round $i: recorder CPU, % of the machine ($ncpu CPUs, epochs of $EPOCH): online analysis on $w, off $wo"
	if [ -n "${OLD:-}" ]; then
		o=$(run "$OLD" true)
		old+=("$o")
		line="$line; old build (on) $o"
	fi
	echo "$line (load average $(cut -d' ' -f1-3 /proc/loadavg))"
done
summary() {
	printf '%s\n' "${@:2}" | sort -n | awk -v what="$1" '{a[NR]=$1} END {printf "%s: median %.3f%% (min %.3f, max %.3f)\n", what, a[int((NR+1)/2)], a[1], a[NR]}'
}
summary "online on" "${with[@]}"
summary "online off" "${without[@]}"
[ -n "${OLD:-}" ] && summary "old build, online on" "${old[@]}"
true
