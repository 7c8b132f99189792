#!/usr/bin/env bash
# Coverage (Chopstix §5.3): the probability that a label which occurred in
# an epoch has no sample in it — a false negative — per vital, at default
# sketch sizes, under a mixed background workload, against exact ground
# truth. COPIES copies of bench/workloads/rare.c, each a label of its own,
# do one event of each vital at a random moment of every epoch and log when
# (the ground truth); the store must hold a sample of that label in that
# epoch. Trials within 50 ms of an epoch boundary are not counted. The
# CPU and storage budgets are off, as in the paper's evaluation ("all
# limits disabled"), so throttling and the storage cap cannot stand in for
# the sketch (STORAGE=10MB measures with the storage budget instead). The background churns
# processes (stress-ng's fork stressor), as a host with cron jobs, health
# checks and builds does. At the defaults, 24 labels over 160 one-second
# epochs make over 3000 trials a vital, enough to show a rate of 1e-3.
# EPOCH sets the epochs' length (and the rare events' period with it):
# longer epochs hold more labels each, and are what a recorder that cannot
# commit a 1-s epoch a second (a loaded machine) keeps up with; the ring
# buffer's losses, which count as misses, are printed.
# Prints rates and their 95% upper bounds; asserts nothing.
#   COPIES=24 SECS=160 EPOCH=1 BACKGROUND="stress-ng --fork 1 --cpu 1 --hdd 1 --sock 1" bench/coverage.sh
source "$(dirname "$0")/lib.sh"
COPIES=${COPIES:-24}
SECS=${SECS:-160}
EPOCH=${EPOCH:-1}
BACKGROUND=${BACKGROUND:-stress-ng --fork 1 --cpu 1 --hdd 1 --sock 1 --timeout $((SECS + 5)) --temp-path $work}
mkdir -p "$work/bin" "$work/logs"
gcc -O2 -o "$work/bin/rare" bench/workloads/rare.c
for i in $(seq -w 1 "$COPIES"); do cp "$work/bin/rare" "$work/bin/rare-$i"; done

start_recorder "$work/data" --epoch "${EPOCH}s" --budget off --storage-budget "${STORAGE:-off}"
# shellcheck disable=SC2086
$BACKGROUND >/dev/null 2>&1 &
bg=$!
sleep 2
pids=()
for i in $(seq -w 1 "$COPIES"); do
	"$work/bin/rare-$i" "$SECS" $((EPOCH * 1000)) "/var/tmp/holter-rare-$i.dat" >"$work/logs/$i" &
	pids+=($!)
	echo "$i $!" >>"$work/pids"
done
wait "${pids[@]}"
kill "$bg" 2>/dev/null || true
wait "$bg" 2>/dev/null || true
sleep 2
stop_recorder
rm -f /var/tmp/holter-rare-*.dat

q() { "$work/holter" query --data "$work/data" --format csv "$1"; }
q "SELECT epoch, start_ns, end_ns FROM epochs" >"$work/epochs.csv"
q "SELECT epoch, vital, pid, syscall_nr, signal, direction FROM samples WHERE comm LIKE 'rare-%'" >"$work/samples.csv"
q "SELECT vital, sum(lost_ringbuf) AS lost_ringbuf, sum(lost_state) AS lost_state, count(*) AS epochs FROM vitals GROUP BY vital ORDER BY vital" >"$work/lost.csv"
python3 bench/coverage.py "$work"
[ -z "${KEEP:-}" ] || cp -r "$work" "$KEEP"
