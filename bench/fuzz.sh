#!/usr/bin/env bash
# The Go fuzz targets, each for EXECS executions (default 10^6): the SQL
# gate of the read-only query sandbox, the flag
# value parsers, the live trace query parser and planner, the OTLP/HTTP
# handler and its decoders (with a real store behind it), and the ELF,
# /proc maps and kallsyms readers. Prints, per target, the executions run,
# the time they took and whether it crashed; a crash leaves its input in
# the package's testdata/fuzz/TARGET (commit it with the fix: `go test`
# then runs it as a regression case). The normal `go test` runs each
# target's seed corpus only.
#   EXECS=1000000 TARGETS="FuzzTraceQuery FuzzELF" bench/fuzz.sh
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
EXECS=${EXECS:-1000000}
declare -A pkg=(
	[FuzzFlagValues]=./cmd/holter
	[FuzzReadOnlyGate]=./internal/store
	[FuzzTraceQuery]=./internal/tracequery
	[FuzzOTLPHTTP]=./internal/otlp
	[FuzzELF]=./internal/symbol
	[FuzzProcMaps]=./internal/symbol
	[FuzzKallsyms]=./internal/symbol
)
TARGETS=${TARGETS:-FuzzReadOnlyGate FuzzFlagValues FuzzTraceQuery FuzzOTLPHTTP FuzzELF FuzzProcMaps FuzzKallsyms}
log=$(mktemp)
trap 'rm -f "$log"' EXIT
printf '%-16s %12s %10s %8s %s\n' target executions seconds crashes package
failed=0
for t in $TARGETS; do
	start=$(date +%s.%N)
	# A new input that widens coverage is minimized for at most 5 s (the
	# default 60 s stalls the OTLP target, whose executions commit).
	go test -run '^$' -fuzz "^$t\$" -fuzztime "${EXECS}x" -fuzzminimizetime 5s "${pkg[$t]}" >"$log" 2>&1
	rc=$?
	secs=$(echo "$(date +%s.%N) - $start" | bc)
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*')
	crashes=0
	if [ $rc -ne 0 ]; then
		crashes=1
		failed=1
	fi
	printf '%-16s %12s %10.1f %8d %s\n' "$t" "${execs:-?}" "$secs" "$crashes" "${pkg[$t]}"
	if [ $rc -ne 0 ]; then
		grep -E -- '--- FAIL|Failing input|panic:|fuzz_test.go|_test.go:[0-9]+' "$log" | head -20 | sed 's/^/    /'
	fi
done
exit $failed
