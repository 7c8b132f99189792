#!/usr/bin/env bash
# Chopstix Table 1: per-operation latency of lmbench-style operations
# (bench/workloads/lat.c) without monitoring, with the floor — an empty
# program on every hook the recorder's default vitals attach to
# (bench/bpfcost floor): what triggering them costs whatever the programs
# do — and with `holter record` at defaults (all vitals, 1% budget). Each
# operation runs WARM seconds before it is timed for SECS, so a monitor
# that adapts within WARM seconds is measured adapted. The three
# configurations alternate over ROUNDS rounds; a row's slowdown is the
# median over rounds of (monitored / unmonitored − 1) within a round,
# with its spread. The bar of a row is 10%, or 1.5 times the floor's
# slowdown where the floor alone costs it more than 10%. Prints; asserts
# nothing. Run as root. Times are elapsed per operation; TIME=cpu takes the
# CPU time the operation used instead (the workload's processes' own), which
# other processes' turns on a loaded machine do not inflate; BOTH=1 prints
# the other table too.
#   ROUNDS=5 SECS=1 WARM=2 TIME=wall bench/table1.sh [ROW...]
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-1}
WARM=${WARM:-2}
TIME=${TIME:-wall}
gcc -O2 -o "$work/lat" bench/workloads/lat.c
go build -o "$work/bpfcost" ./bench/bpfcost

for i in $(seq "$ROUNDS"); do
	"$work/lat" "$SECS" "$WARM" "$@" >"$work/none.$i"
	start_floor
	"$work/lat" "$SECS" "$WARM" "$@" >"$work/floor.$i"
	stop_floor >/dev/null
	start_recorder "$work/data"
	"$work/lat" "$SECS" "$WARM" "$@" >"$work/holter.$i"
	stop_recorder
	rm -rf "$work/data"
	echo "round $i/$ROUNDS done" >&2
done

python3 bench/table1.py "$work" "$ROUNDS" "$TIME"
[ -z "${BOTH:-}" ] || python3 bench/table1.py "$work" "$ROUNDS" "$([ "$TIME" = wall ] && echo cpu || echo wall)"
