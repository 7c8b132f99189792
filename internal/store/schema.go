package store

// schemaVersion is bumped with every change to schema; migrations bring an
// older file up to date in Open.
const schemaVersion = 1

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
		ustack_id UBIGINT,
		ip UBIGINT,
		in_kernel BOOLEAN,
		prio INTEGER,
		delay_ns BIGINT,
		site UBIGINT,
		preempted BOOLEAN,
		sleep_state UINTEGER,
		dev VARCHAR,
		sector UBIGINT,
		bytes_requested UBIGINT,
		bytes_completed UBIGINT,
		op VARCHAR,
		latency_ns BIGINT,
		queue_ns BIGINT,
		error INTEGER)`,
	`CREATE TABLE IF NOT EXISTS stacks (
		stack_id UBIGINT PRIMARY KEY,
		kind VARCHAR NOT NULL,
		frames VARCHAR[] NOT NULL,
		modules VARCHAR[] NOT NULL)`,
	`CREATE TABLE IF NOT EXISTS executables (
		path VARCHAR PRIMARY KEY,
		build_id VARCHAR NOT NULL)`,
}
