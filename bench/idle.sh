#!/usr/bin/env bash
# The idle recorder's CPU at defaults (UI and OTLP receivers on, online
# analysis on, 60-s epochs) on a quiet host: for each round, a recorder on
# a fresh data directory is left WARM seconds, then its CPU and its engine
# processes' (utime+stime of the recorder, of its ended children and of
# those running) is counted over DUR seconds, as % of the whole machine,
# with the recorder's RSS at the end. With BASE_BIN, rounds of that binary
# and of this tree's (or HOLTER_BIN) are interleaved. Prints figures;
# asserts nothing. Run as root on an otherwise idle machine.
#   BASE_BIN=/tmp/holter-old ROUNDS=2 DUR=200 bench/idle.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
DUR=${DUR:-200}
WARM=${WARM:-40}
ncpu=$(nproc)
tck=$(getconf CLK_TCK)
[ -z "${BASE_BIN:-}" ] || cp "$BASE_BIN" "$work/holter-base"

ticks() { awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat" 2>/dev/null || echo 0; }
all_ticks() { # the recorder's, its ended children's and its running ones'
	local t
	t=$(ticks "$1")
	for c in $(pgrep -P "$1" 2>/dev/null || true); do t=$((t + $(ticks "$c"))); done
	echo "$t"
}
own_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

round() { # round NAME EXE
	local data=$work/$1 exe=$2
	mkdir -p "$data"
	"$exe" record --data "$data" 2>"$data.log" &
	local pid=$!
	sleep "$WARM"
	kill -0 "$pid" 2>/dev/null || { cat "$data.log" >&2; exit 1; }
	local t0 o0 s0 t1 o1 s1 rss
	t0=$(all_ticks "$pid") o0=$(own_ticks "$pid") s0=$(date +%s.%N)
	sleep "$DUR"
	t1=$(all_ticks "$pid") o1=$(own_ticks "$pid") s1=$(date +%s.%N)
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
	kill -INT "$pid"
	wait "$pid" 2>/dev/null || true
	awk -v n="$1" -v t="$((t1 - t0))" -v o="$((o1 - o0))" -v w="$(echo "$s1 - $s0" | bc)" -v hz="$tck" -v c="$ncpu" -v r="$rss" \
		'BEGIN {printf "%-10s %.3f %% of the machine (recorder %.3f %%, engines %.3f %%), recorder RSS %.1f MiB\n", n, 100*t/hz/w/c, 100*o/hz/w/c, 100*(t-o)/hz/w/c, r/1024}'
}

echo "idle recorder at defaults, ${DUR} s after ${WARM} s, $ncpu CPUs"
for i in $(seq "$ROUNDS"); do
	[ -z "${BASE_BIN:-}" ] || round "base$i" "$work/holter-base"
	round "this$i" "$work/holter"
done
