#!/usr/bin/env bash
# The idle cost of online analysis (cmd/holter/online.go): the recorder's
# own CPU time (process time, from the epochs table) per second recorded,
# with --online=true and --online=false, in ROUNDS interleaved pairs of SECS
# seconds each with 1 s epochs, and the ratio with/without. The first
# EPOCH_SKIP epochs of each recording (start-up, first symbolization) are
# left out. Per second rather than per epoch: on a loaded machine a slow
# commit stretches epochs. With OLD=path/to/holter, a build that always
# analyses (before --online existed) is measured in the same rounds too.
# Prints figures; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-40}
EPOCH_SKIP=${EPOCH_SKIP:-5}
work=$(mktemp -d)
rec=""
trap '[ -n "$rec" ] && kill $rec 2>/dev/null; rm -rf "$work"' EXIT
go build -o "$work/holter" ./cmd/holter
ncpu=$(nproc)

# run prints the recorder's CPU milliseconds per second recorded.
run() {
	rm -rf "$work/data"
	"${2:-$work/holter}" record --data "$work/data" --epoch 1s --api "" ${1:+--online="$1"} 2>"$work/rec.log" &
	rec=$!
	sleep "$SECS"
	kill -INT $rec
	wait $rec || true
	rec=""
	"$work/holter" query --data "$work/data" --format csv "
		SELECT round(sum(monitor_user_ns) / sum(end_ns - start_ns) * 1e3, 3) FROM epochs WHERE epoch > $EPOCH_SKIP" | tail -1
}
ratios=()
old=()
for i in $(seq "$ROUNDS"); do
	with=$(run true)
	without=$(run false)
	ratio=$(awk -v a="$with" -v b="$without" 'BEGIN{printf "%.3f", a/b}')
	ratios+=("$ratio")
	line="round $i: recorder CPU ms per second: with online analysis $with, without $without, ratio $ratio"
	if [ -n "${OLD:-}" ]; then
		o=$(run "" "$OLD")
		old+=("$(awk -v a="$o" -v b="$without" 'BEGIN{printf "%.3f", a/b}')")
		line="$line; old build $o, ratio ${old[-1]}"
	fi
	echo "$line (of $ncpu CPUs)"
done
summary() {
	printf '%s\n' "${@:2}" | sort -n | awk -v what="$1" '{a[NR]=$1} END {printf "%s: median %.3f (min %.3f, max %.3f)\n", what, a[int((NR+1)/2)], a[1], a[NR]}'
}
summary "with/without" "${ratios[@]}"
[ -n "${OLD:-}" ] && summary "old build/without" "${old[@]}"
true
