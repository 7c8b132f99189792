# Shared by the benchmarks in bench/: build holter once, start and stop a
# recorder at defaults, summarise ratios. Source it; it sets $work.
# HOLTER_BIN=PATH measures that holter binary instead of building this tree
# (e.g. an older commit's, for a before/after comparison).
# KEEP=DIR copies the work directory (the recordings and the recorder's
# log) to DIR when the benchmark ends, for a look afterwards.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
[ "$(id -u)" = 0 ] || { echo "benchmarks attach BPF programs: run as root" >&2; exit 1; }
work=$(mktemp -d)
rec=""
# remove_work: the work directory goes (copied to $KEEP first, if set),
# and any process still running from it (a service a failed run left).
remove_work() {
	pkill -f -- "$work/" 2>/dev/null || true
	if [ -n "${KEEP:-}" ]; then cp -r "$work" "$KEEP"; fi
	rm -rf "$work"
}
trap 'stop_recorder; stop_floor >/dev/null; remove_work' EXIT
if [ -n "${HOLTER_BIN:-}" ]; then cp "$HOLTER_BIN" "$work/holter"; else go build -o "$work/holter" ./cmd/holter; fi

# start_recorder DATA_DIR [FLAGS...]: holter record at defaults (no API;
# $HOLTER_ARGS adds flags, e.g. "--vitals cpu,sched"), returns once every
# vital is attached. $recorder_exe, when set, is the holter binary to run.
start_recorder() {
	local data=$1
	shift
	# shellcheck disable=SC2086
	"${recorder_exe:-$work/holter}" record --data "$data" --api "" ${HOLTER_ARGS:-} "$@" 2>"$data.log" &
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

# start_floor: an empty program on every hook of the recorder's default
# vitals (bench/bpfcost floor, built into $work/bpfcost); returns once
# they are attached. stop_floor detaches them and prints their run counts
# and times.
floor=""
start_floor() {
	coproc FLOOR { exec "$work/bpfcost" floor "$@"; }
	floor=$FLOOR_PID
	local line
	read -r line <&"${FLOOR[0]}" || { echo "bpfcost floor failed" >&2; exit 1; }
	[ "$line" = attached ] || { echo "bpfcost floor: $line" >&2; exit 1; }
}

stop_floor() {
	[ -n "$floor" ] || return 0
	kill -INT "$floor"
	cat <&"${FLOOR[0]}"
	wait "$floor" 2>/dev/null || true
	floor=""
}
