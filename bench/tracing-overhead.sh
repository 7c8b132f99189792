#!/usr/bin/env bash
# Overhead of request tracing plus kernel accounting on the demo system's
# throughput (Stardust Table 3: under 6%). Each pair runs the demo system
# (client load → front → middle → storage) once without any tracing backend
# and once exporting OTLP to `holter record` (which accounts the services'
# threads), in alternating order, and prints each ratio and their median.
#
#   sudo bench/tracing-overhead.sh [pairs] [seconds]
set -euo pipefail
cd "$(dirname "$0")/.."
pairs=${1:-5}
secs=${2:-5}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/holter" ./cmd/holter
go build -o "$work/demo" ./internal/requests/testdata/demo

# run MODE: prints requests/s of one load run.
run() {
	local mode=$1 otlp=() rec=
	if [ "$mode" = on ]; then
		"$work/holter" record --data "$work/data" --epoch 1s --api "" --otlp-grpc 127.0.0.1:24317 --otlp-http 127.0.0.1:24318 2>"$work/rec.log" &
		rec=$!
		until grep -q "OTLP receivers" "$work/rec.log" 2>/dev/null; do sleep 0.2; done
		otlp=(-otlp-grpc 127.0.0.1:24317)
	fi
	"$work/demo" storage -addr 127.0.0.1:28003 -dir "$work" "${otlp[@]}" >/dev/null 2>&1 &
	local s=$!
	"$work/demo" middle -addr 127.0.0.1:28002 -storage http://127.0.0.1:28003 -burn 2ms "${otlp[@]}" >/dev/null 2>&1 &
	local m=$!
	"$work/demo" front -addr 127.0.0.1:28001 -middle http://127.0.0.1:28002 "${otlp[@]}" >/dev/null 2>&1 &
	local f=$!
	sleep 1
	# Warm-up: the services' processes become accounted.
	"$work/demo" load -front http://127.0.0.1:28001 -duration 2s -concurrency 4 "${otlp[@]}" >/dev/null
	sleep 1
	"$work/demo" load -front http://127.0.0.1:28001 -duration "${secs}s" -concurrency 4 "${otlp[@]}" |
		sed -n 's/.*"per_second": \([0-9.]*\).*/\1/p'
	kill $s $m $f
	wait $s $m $f 2>/dev/null || true
	if [ -n "$rec" ]; then
		kill -INT $rec
		wait $rec 2>/dev/null || true
		rm -rf "$work/data"
	fi
}

ratios=()
for i in $(seq "$pairs"); do
	if ((i % 2)); then off=$(run off); on=$(run on); else on=$(run on); off=$(run off); fi
	r=$(awk -v a="$on" -v b="$off" 'BEGIN{printf "%.3f", a/b}')
	echo "pair $i: off $off req/s, on $on req/s, on/off $r"
	ratios+=("$r")
done
printf '%s\n' "${ratios[@]}" | sort -n | awk '{a[NR]=$1} END{m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "median on/off throughput %.3f (overhead %.1f%%), spread %s..%s over %d pairs\n", m, (1-m)*100, a[1], a[NR], NR}'
