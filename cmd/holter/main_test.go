package main

import (
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestMain lets the tests share one build of each command they run
// (testutil.BuildHolter).
//
// The tests that call t.Parallel mostly wait — for recorders to start,
// commit, be killed, ride out a fault, ship to ClickHouse — and run beside
// each other (four at a time in make test, -parallel 4) once the others
// are done, so that none of them runs beside a test that judges what the
// recorder saw (findings, incidents, budgets, costs, the UI's top tables).
// Any of them may run at once, so each
//   - asserts only what its own recorder did with its own store, export
//     or status (epochs whole and present, spans stored once, the status
//     and log naming its fault), never what it recorded of the machine's
//     other processes, which the others' recorders and ClickHouse are;
//   - runs no busy workload of its own, which would slow the others;
//   - listens only on ports the kernel picks (127.0.0.1:0, freeAddr,
//     ClickHouse's free ports), in network namespaces of its own (the
//     fleet tests' agents, each pair numbered apart), or not at all
//     (--otlp-grpc off), never on the recorder's default OTLP ports in
//     the root namespace, and keeps its stores, file systems and mounts
//     in directories of its own.
func TestMain(m *testing.M) { testutil.Main(m) }
