package store

import "fmt"

// schemaVersion is bumped with every change to schema; migrations bring an
// older file up to date in Open.
const schemaVersion = 8

// schema creates the tables of an empty store. Times are UTC nanoseconds.
// The samples table has one sparse column per event field; a column that
// does not apply to a vital is NULL, which DuckDB stores for nearly nothing.
var schema = []string{
	`CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR)`,
	`CREATE TABLE IF NOT EXISTS epochs (
		host VARCHAR NOT NULL,
		epoch BIGINT NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		samples BIGINT NOT NULL,
		lost BIGINT NOT NULL,
		monitor_bpf_ns BIGINT NOT NULL,
		monitor_user_ns BIGINT NOT NULL,
		PRIMARY KEY (host, epoch))`,
	`CREATE TABLE IF NOT EXISTS vitals (
		host VARCHAR NOT NULL,
		epoch BIGINT NOT NULL,
		vital VARCHAR NOT NULL,
		events UBIGINT NOT NULL,
		weight_sum UBIGINT NOT NULL,
		samples UBIGINT NOT NULL,
		distinct_labels_est DOUBLE NOT NULL,
		threshold UBIGINT NOT NULL,
		lost_ringbuf UBIGINT NOT NULL,
		lost_state UBIGINT NOT NULL,
		no_stack UBIGINT NOT NULL,
		PRIMARY KEY (host, epoch, vital))`,
	// version 2
	`ALTER TABLE vitals ADD COLUMN IF NOT EXISTS secondary UBIGINT DEFAULT 0`,
	`CREATE TABLE IF NOT EXISTS samples (
		host VARCHAR NOT NULL,
		epoch BIGINT NOT NULL,
		ts_ns BIGINT NOT NULL,
		vital VARCHAR NOT NULL,
		label_hash UBIGINT NOT NULL,
		weight UBIGINT NOT NULL,
		est_count UBIGINT NOT NULL,
		pid UINTEGER NOT NULL,
		tid UINTEGER NOT NULL,
		uid UINTEGER NOT NULL,
		comm VARCHAR NOT NULL,
		exe VARCHAR NOT NULL,
		kstack_id UBIGINT,
		ustack_id UBIGINT)`,
	`CREATE TABLE IF NOT EXISTS stacks (
		stack_id UBIGINT PRIMARY KEY,
		kind VARCHAR NOT NULL,
		frames VARCHAR[] NOT NULL,
		modules VARCHAR[] NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS executables (
		path VARCHAR PRIMARY KEY,
		build_id VARCHAR NOT NULL)`,
	// version 3: findings and runs (see diagnosis.go)
	findingsDDL,
	runsDDL,
	// version 4: request tracing — spans, links, events, thread activity,
	// span accounting, span rollups and the counter views (requests.go),
	// appended by migrate after the other tables.
	// version 5: the processes of a run; none, not NULL, for the runs
	// added before (ClickHouse 18.16 has no nullable arrays to ship to)
	`ALTER TABLE runs ADD COLUMN IF NOT EXISTS pids UINTEGER[] DEFAULT []`,
	// version 6: the samples the recorder's cap per epoch did not store
	`ALTER TABLE vitals ADD COLUMN IF NOT EXISTS capped UBIGINT DEFAULT 0`,
	// version 7: the ranges the online analysis has judged (diagnosis.go)
	analysedDDL,
	// version 8: the events the kernel did not run a vital's program for
	`ALTER TABLE vitals ADD COLUMN IF NOT EXISTS lost_recursion UBIGINT DEFAULT 0`,
}

// Column is one vital-specific column of the samples table.
type Column struct {
	Name string
	Type string
	Doc  string
}

// SampleFields are the vital-specific columns of the samples table, in
// table order: new ones go at the end (Open adds them to older stores).
var SampleFields = []Column{
	{"ip", "UBIGINT", "cpu, umem: exact program counter"},
	{"in_kernel", "BOOLEAN", "cpu: the PC is in the kernel"},
	{"prio", "INTEGER", "sched, blck: priority"},
	{"delay_ns", "BIGINT", "sched: runnable wait; blck: time blocked; lock: time waited"},
	{"site", "UBIGINT", "sched, blck: user-space PC at kernel entry"},
	{"preempted", "BOOLEAN", "sched: the wait followed a preemption (else a wake-up)"},
	{"sleep_state", "UINTEGER", "blck: task state when it went to sleep"},
	{"dev", "VARCHAR", "blio: device major:minor"},
	{"sector", "UBIGINT", "blio: first sector"},
	{"bytes_requested", "UBIGINT", "blio: bytes the request asked for"},
	{"bytes_completed", "UBIGINT", "blio: bytes completed"},
	{"op", "VARCHAR", "blio: read, write, flush, discard, ..."},
	{"latency_ns", "BIGINT", "blio: issue to completion; syscall: entry to exit"},
	{"queue_ns", "BIGINT", "blio: insertion to issue"},
	{"error", "INTEGER", "blio: block status (0 ok)"},
	// version 2
	{"syscall_nr", "INTEGER", "syscall: number"},
	{"arg0", "UBIGINT", "syscall: first argument"},
	{"ret", "BIGINT", "syscall: return value; lock: contention_end's ret"},
	{"signal", "INTEGER", "signal: number"},
	{"target_pid", "UINTEGER", "signal: receiving process"},
	{"target_tid", "UINTEGER", "signal: receiving thread"},
	{"si_code", "INTEGER", "signal: si_code"},
	{"handler", "UBIGINT", "signal: receiver's handler (0 default, 1 ignored)"},
	{"result", "INTEGER", "signal: generation result (0 delivered)"},
	{"lock_addr", "UBIGINT", "lock: address of the lock"},
	{"lock_flags", "UINTEGER", "lock: LCB_F_* flags (spin, read, write, rt, per-cpu, mutex)"},
	{"alloc_order", "INTEGER", "kmem: allocation order (2^order pages)"},
	{"gfp", "UINTEGER", "kmem: GFP flags"},
	{"migrate_type", "INTEGER", "kmem: migrate type"},
	{"address", "UBIGINT", "umem: faulting address"},
	{"fault_code", "UBIGINT", "umem: page fault error code"},
	{"free_kb", "UBIGINT", "kmem, umem: free memory (MemFree) when the sample was read"},
	{"direction", "VARCHAR", "sock: send or recv"},
	{"family", "VARCHAR", "sock: inet, inet6, unix, ..."},
	{"protocol", "VARCHAR", "sock: tcp, udp, ..."},
	{"peer", "VARCHAR", "sock: peer address"},
	{"peer_port", "INTEGER", "sock: peer port"},
	{"local_port", "INTEGER", "sock: local port"},
	{"bytes", "UBIGINT", "sock: bytes moved"},
	{"kernel_kb", "UBIGINT", "kmem: kernel memory in use, not page cache, user memory or reclaimable, when the sample was read"},
}

// fieldColumnDDL adds every field column a store lacks.
func fieldColumnDDL() []string {
	out := make([]string, len(SampleFields))
	for i, c := range SampleFields {
		out[i] = fmt.Sprintf("ALTER TABLE samples ADD COLUMN IF NOT EXISTS %s %s", c.Name, c.Type)
	}
	return out
}
