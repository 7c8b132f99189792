#!/usr/bin/env bash
# The Shen et al. §4 reproduction (cmd/holter/shen_test.go, also in the
# test suite), ROUNDS times: 22 io_bench runs through `holter run` on a
# loop device, an anomaly planted in one condition region (readahead
# recorded as 128 KiB but set to 4 KiB). Prints each round's FIGURES line
# (symptoms found, true and false positives, planted runs missed, rank of
# the device request size) and how many rounds met the bar: the planted
# region flagged, the metric among the top three, no more false positives
# than true ones. Needs root and losetup.
#
#   sudo bench/shen.sh        (ROUNDS=5)
set -uo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
pass=0
for i in $(seq 1 "$ROUNDS"); do
	out=$(go test -count=1 -run 'TestShenReproduction$' -v ./cmd/holter/ 2>&1)
	rc=$?
	echo "round $i: $(grep -o 'FIGURES: .*' <<<"$out")"
	grep -E 'shen_test.go:[0-9]+: (symptom|.*want among)' <<<"$out" | sed 's/^ */    /'
	[ $rc -eq 0 ] && pass=$((pass + 1))
done
echo "rounds meeting the bar: $pass of $ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
