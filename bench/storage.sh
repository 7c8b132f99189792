#!/usr/bin/env bash
# What the recorder keeps and holds at defaults (60 s epochs, all vitals):
# bytes stored per day, extrapolated from MINUTES of recording (DuckDB's
# used blocks after a checkpoint, less an empty store's), the recorder's
# peak RSS, and the kernel memory of its maps (holter status). Idle, or
# under WORKLOAD. Prints figures; asserts nothing. Run as root.
#   MINUTES=5 bench/storage.sh
#   MINUTES=5 WORKLOAD="stress-ng --cpu 1 --io 1 --fork 1 --sock 1" bench/storage.sh
source "$(dirname "$0")/lib.sh"
MINUTES=${MINUTES:-5}

used() { # used bytes of a stopped store, after a checkpoint
	"$work/holter" query --data "$1" --format csv \
		"SELECT block_size * used_blocks FROM pragma_database_size() LIMIT 1" | tail -1
}
# an empty store: what the schema alone occupies
"$work/holter" record --data "$work/empty" --api "" --epoch 1s 2>/dev/null &
p=$!
sleep 0.5
kill -INT $p; wait $p || true
"$work/holter" query --data "$work/empty" "CHECKPOINT" >/dev/null 2>&1 || true
base=$(used "$work/empty")

"$work/holter" record --data "$work/data" --api 127.0.0.1:7079 2>"$work/rec.log" &
rec=$!
sleep 3
wl=""
if [ -n "${WORKLOAD:-}" ]; then
	# shellcheck disable=SC2086
	$WORKLOAD >/dev/null 2>&1 &
	wl=$!
fi
sleep $((MINUTES * 60))
"$work/holter" status --data "$work/data" | grep "kernel memory"
rss=$(awk '/VmHWM/ {print $2}' /proc/$rec/status)
[ -n "$wl" ] && { kill "$wl" 2>/dev/null; wait "$wl" 2>/dev/null || true; }
stop_recorder
"$work/holter" query --data "$work/data" "SELECT count(*) AS epochs, sum(samples) AS samples,
	(max(end_ns) - min(start_ns)) / 1e9 AS seconds FROM epochs"
read -r epochs secs < <("$work/holter" query --data "$work/data" --format csv \
	"SELECT count(*), (max(end_ns) - min(start_ns)) / 1e9 FROM epochs" | tail -1 | tr , ' ')
u=$(used "$work/data")
echo "workload: ${WORKLOAD:-idle}"
echo "recorder peak RSS: $((rss / 1024)) MiB"
awk -v u="$u" -v b="$base" -v s="$secs" -v e="$epochs" 'BEGIN {
	printf "stored: %d bytes over %d epochs (%.0f s) beyond an empty store (%d bytes)\n", u - b, e, s, b
	printf "bytes per day at this rate: %.1f MB\n", (u - b) / s * 86400 / 1e6 }'
