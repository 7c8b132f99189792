#!/usr/bin/env bash
# The recorder's overhead, measured two ways (as root):
#  1. its own CPU — process time plus the BPF programs' run time from the
#     kernel's statistics — as a share of the machine, per epoch, while a
#     workload runs (default: idle; WORKLOAD="stress-ng --cpu 2 --io 1");
#  2. the slowdown of a context-switch storm (pipe ping-pong, lmbench's
#     lat_ctx pattern): the median ratio of ROUNDS interleaved runs without
#     and with the recorder, with the spread.
# Prints ratios against baselines taken in the same run; asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-4}
EPOCH_S=${EPOCH_S:-10}
EPOCHS=${EPOCHS:-3}
work=$(mktemp -d)
trap 'kill $rec 2>/dev/null || true; rm -rf "$work"' EXIT

go build -o "$work/holter" ./cmd/holter
gcc -O2 -o "$work/pingpong" bench/workloads/pingpong.c
ncpu=$(nproc)

echo "== monitor CPU, ${WORKLOAD:-idle}, $EPOCHS epochs of ${EPOCH_S}s"
"$work/holter" record --data "$work/data" --epoch "${EPOCH_S}s" --api "" 2>"$work/rec.log" &
rec=$!
sleep 2
wl=""
if [ -n "${WORKLOAD:-}" ]; then
	$WORKLOAD >/dev/null 2>&1 &
	wl=$!
fi
# the first epoch includes start-up (kallsyms, first symbolization): skip
# it. Sleep rather than poll the log: a poller's processes are not idle.
sleep $(((EPOCHS + 1) * EPOCH_S + 1))
[ -n "$wl" ] && kill "$wl" 2>/dev/null; wait "$wl" 2>/dev/null || true
kill -INT $rec; wait $rec || true
"$work/holter" query --data "$work/data" "
	SELECT epoch, samples,
	       round(monitor_bpf_ns / ((end_ns - start_ns) * $ncpu) * 100, 3) AS bpf_pct,
	       round(monitor_user_ns / ((end_ns - start_ns) * $ncpu) * 100, 3) AS user_pct,
	       round((monitor_bpf_ns + monitor_user_ns) / ((end_ns - start_ns) * $ncpu) * 100, 3) AS total_pct_of_machine
	FROM epochs WHERE epoch > 1 AND epoch <= $((EPOCHS + 1)) ORDER BY epoch"

echo "== pipe ping-pong, $ROUNDS interleaved rounds of ${SECS}s (round trips/s)"
ratios=()
for i in $(seq "$ROUNDS"); do
	base=$("$work/pingpong" "$SECS")
	"$work/holter" record --data "$work/pp" --epoch 60s --api "" 2>/dev/null &
	rec=$!
	sleep 1.5
	with=$("$work/pingpong" "$SECS")
	kill -INT $rec; wait $rec || true
	ratio=$(awk -v a="$with" -v b="$base" 'BEGIN{printf "%.4f", a/b}')
	ratios+=("$ratio")
	echo "round $i: without $base, with $with, ratio $ratio"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "ping-pong throughput with/without: median %.3f (min %.3f, max %.3f)\n", a[int((NR+1)/2)], a[1], a[NR]}'
