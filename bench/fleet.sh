#!/usr/bin/env bash
# Fleet figures (issue 8), as root, each against a baseline of the same run:
#  1. shipping: rows/s one agent ships to a real ClickHouse (Debian's
#     clickhouse-server, started on loopback) from a synthetic store of busy
#     1-s epochs, and the CPU it costs (getrusage) against committing the
#     same epochs locally; the committer's share (spooling) alone;
#  2. end to end: from an epoch's end to all its samples being queryable in
#     ClickHouse, at the default rate, against the local commit time;
#  3. fan-out: a live query's interval latency (agent interval end → merged
#     answer) and the coordinator's CPU with one agent and with two, each a
#     host in a network namespace.
# COUNT runs of each (default 3), to show the spread. Asserts nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
COUNT=${COUNT:-3}
go test -run '^$' -bench 'Ship' -benchtime 1x -count "$COUNT" ./internal/export/ | grep -E 'Benchmark|bench_test'
go test -run '^$' -bench 'Spool' -benchtime 20x -count "$COUNT" ./internal/export/ | grep -E '^Benchmark'
go test -run '^$' -bench 'FleetFanOut' -benchtime 1x -count "$COUNT" ./cmd/holter/ | grep -E 'Benchmark|bench_test'
