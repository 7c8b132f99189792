#!/usr/bin/env bash
# Chopstix Table 1: per-operation latency of lmbench-style operations
# without and with `holter record` at defaults (all vitals, 1% budget).
# ROUNDS interleaved rounds; each row's slowdown is the median over rounds
# of (with / without − 1). Prints ratios; asserts nothing. Run as root.
#   ROUNDS=5 SECS=1 bench/table1.sh
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-5}
SECS=${SECS:-1}
gcc -O2 -o "$work/lat" bench/workloads/lat.c

for i in $(seq "$ROUNDS"); do
	"$work/lat" "$SECS" >"$work/without.$i"
	start_recorder "$work/data"
	"$work/lat" "$SECS" >"$work/with.$i"
	stop_recorder
	echo "round $i/$ROUNDS done" >&2
done

printf '%-18s %12s %12s %10s %s\n' test "without µs" "with µs" slowdown "(spread over $ROUNDS rounds)"
cut -f1 "$work/without.1" | while IFS= read -r name; do
	get() { awk -F'\t' -v n="$name" '$1 == n {print $2}' "$1"; }
	wo=$(for i in $(seq "$ROUNDS"); do get "$work/without.$i"; done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	wi=$(for i in $(seq "$ROUNDS"); do get "$work/with.$i"; done | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}')
	spread=$(for i in $(seq "$ROUNDS"); do
		awk -v a="$(get "$work/with.$i")" -v b="$(get "$work/without.$i")" 'BEGIN {print (a / b - 1) * 100}'
	done | median_spread)
	read -r med rest <<<"$spread"
	printf '%-18s %12.4f %12.4f %9.1f%% %s\n' "$name" "$wo" "$wi" "$med" "$rest %"
done
