#!/usr/bin/env bash
# Chopstix Table 2: two macro-benchmarks, each without monitoring, with
# `holter record` at defaults (all vitals, 1% budget), and with the
# reference profiler `perf record -F 99 -a -g` — throughput ratios against
# the unmonitored runs of the same round. Configurations are interleaved
# over ROUNDS rounds. Prints ratios; asserts nothing. Run as root; needs
# perf (linux-perf) and wrk.
#   build: a cold `go build -a std` (the Go standard library, ~300 packages)
#   web:   wrk -t2 -c512 against bench/httpd (a 1400-byte page) on loopback
#   ROUNDS=3 WRK_SECS=10 bench/table2.sh   (BUILD=0 skips the build row)
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-3}
WRK_SECS=${WRK_SECS:-10}
for tool in perf wrk; do
	command -v $tool >/dev/null || { echo "table2: needs $tool (apt-get install linux-perf wrk)" >&2; exit 1; }
done
go build -o "$work/httpd" ./bench/httpd
perf_pid=""

monitor_on() {
	case $1 in
	holter) start_recorder "$work/data" ;;
	perf)
		perf record -F 99 -a -g -o "$work/perf.data" 2>"$work/perf.log" &
		perf_pid=$!
		sleep 2 ;;
	esac
}
monitor_off() {
	case $1 in
	holter) stop_recorder ;;
	perf) kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true; rm -f "$work/perf.data" ;;
	esac
}

build() {
	[ "${BUILD:-1}" = 1 ] || { echo 1; return; }
	local cache
	cache=$(mktemp -d)
	local t0 t1
	t0=$(date +%s.%N)
	GOCACHE=$cache go build -a std
	t1=$(date +%s.%N)
	rm -rf "$cache"
	awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.2f", b - a}'
}

web() {
	"$work/httpd" 127.0.0.1:8089 &
	local h=$!
	sleep 0.5
	wrk -t2 -c512 -d"${WRK_SECS}s" http://127.0.0.1:8089/ | awk '/^Requests\/sec:/ {print $2}'
	kill $h; wait $h 2>/dev/null || true
}

for i in $(seq "$ROUNDS"); do
	for m in none holter perf; do
		monitor_on $m
		b=$(build)
		w=$(web)
		monitor_off $m
		echo "$m $b $w" >>"$work/results.$i"
		echo "round $i/$ROUNDS $m: build ${b}s, web ${w} req/s" >&2
	done
done

printf '%-8s %-28s %-28s\n' "" "build s (median)" "web req/s (median)"
for m in none holter perf; do
	b=$(cat "$work"/results.* | awk -v m=$m '$1 == m {print $2}' | median_spread)
	w=$(cat "$work"/results.* | awk -v m=$m '$1 == m {print $3}' | median_spread)
	printf '%-8s %-28s %-28s\n' "$m" "$b" "$w"
done
echo "throughput ratios monitored/unmonitored, per round, median (min … max):"
for m in holter perf; do
	# build throughput is 1/time: ratio = time_none / time_m
	rb=$(for f in "$work"/results.*; do awk -v m=$m '$1 == "none" {n=$2} $1 == m {x=$2} END {print n / x}' "$f"; done | median_spread)
	rw=$(for f in "$work"/results.*; do awk -v m=$m '$1 == "none" {n=$3} $1 == m {x=$3} END {print x / n}' "$f"; done | median_spread)
	printf '%-8s build %s   web %s\n' "$m" "$rb" "$rw"
done
