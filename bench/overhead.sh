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

[ "${ACCOUNT:-0}" = 1 ] || exit 0
command -v bpftool >/dev/null || { echo "ACCOUNT=1 needs bpftool (apt-get install bpftool)" >&2; exit 1; }
echo "== request accounting: ping-pong on CPU 0 followed from exec, $ROUNDS interleaved rounds of ${SECS}s"
ratios=()
for i in $(seq "$ROUNDS"); do
	base=$(taskset -c 0 "$work/pingpong" "$SECS")
	rm -rf "$work/acct"
	"$work/holter" record --data "$work/acct" --api "" --vitals cpu --otlp-grpc 127.0.0.1:0 --otlp-http off \
		--account-exe "$work/pingpong" 2>"$work/acct.log" &
	rec=$!
	for _ in $(seq 300); do grep -q '^recording host' "$work/acct.log" && break; sleep 0.1; done
	with=$(taskset -c 0 "$work/pingpong" "$SECS")
	# The recorder samples the kernel's run-time statistics (on a tenth of
	# the time); a second of ping-pong with them on gives the per-call
	# figures.
	sysctl -qw kernel.bpf_stats_enabled=1
	taskset -c 0 "$work/pingpong" 1 >/dev/null
	sysctl -qw kernel.bpf_stats_enabled=0
	stats=$(bpftool -j prog show | python3 -c '
import json, sys
for p in json.load(sys.stdin):
    if p.get("name") in ("account_switch", "account_wakeup") and p.get("run_cnt"):
        print("%s %.0f ns/call" % (p["name"], p["run_time_ns"] / p["run_cnt"]), end="; ")
')
	kill -INT $rec; wait $rec || true
	ratio=$(awk -v a="$with" -v b="$base" 'BEGIN{printf "%.4f", a/b}')
	ratios+=("$ratio")
	extra=$(awk -v a="$with" -v b="$base" 'BEGIN{printf "%.2f", 1e6/a - 1e6/b}')
	echo "round $i: without $base, followed $with, ratio $ratio, +$extra us a round trip; $stats"
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END {printf "followed/without: median %.3f (min %.3f, max %.3f)\n", a[int((NR+1)/2)], a[1], a[NR]}'
