# Shared by the benchmarks in bench/: build holter once, start and stop a
# recorder at defaults, summarise ratios. Source it; it sets $work.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "$(id -u)" = 0 ] || { echo "benchmarks attach BPF programs: run as root" >&2; exit 1; }
work=$(mktemp -d)
rec=""
trap 'stop_recorder; rm -rf "$work"' EXIT
go build -o "$work/holter" ./cmd/holter

# start_recorder DATA_DIR [FLAGS...]: holter record at defaults (no API;
# $HOLTER_ARGS adds flags, e.g. "--vitals cpu,sched"), returns once every
# vital is attached.
start_recorder() {
	local data=$1
	shift
	# shellcheck disable=SC2086
	"$work/holter" record --data "$data" --api "" ${HOLTER_ARGS:-} "$@" 2>"$data.log" &
	rec=$!
	for _ in $(seq 300); do
		grep -q '^recording host' "$data.log" 2>/dev/null && return 0
		kill -0 "$rec" 2>/dev/null || { cat "$data.log" >&2; exit 1; }
		sleep 0.1
	done
	echo "recorder did not start: $(cat "$data.log")" >&2
	exit 1
}

stop_recorder() {
	[ -n "$rec" ] || return 0
	kill -INT "$rec" 2>/dev/null || true
	wait "$rec" 2>/dev/null || true
	rec=""
}

# median_spread: reads numbers, prints "median (min … max)".
median_spread() {
	sort -g | awk '{a[NR]=$1} END {if (NR) printf "%.4f (%.4f … %.4f)", a[int((NR+1)/2)], a[1], a[NR]}'
}
