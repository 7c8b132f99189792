// Package tracequery is holter's live tracing: a SQL subset over probe
// sources, compiled into eBPF programs generated at run time with
// cilium/ebpf/asm (no clang on the host), after Fay's query splitting
// (seed 001, §4.2, Figure 10) and SystemTap's probe points (seed 003).
//
// Sources (holter trace --list shows them): tracepoint.GROUP.EVENT;
// tp_btf.EVENT and rawtracepoint.EVENT (the tracepoint's arguments with
// their kernel types, read by path: args.prev.comm, btf.go);
// syscall.NAME and syscall.any (arguments, ret, latency; nr named);
// uprobe.BINARY.SYMBOL (a library or program name, or a quoted path:
// arg0..arg5, ip, ret, latency); usdt."PATH".PROVIDER.NAME; profile.hz_N;
// interval.DURATION; paired latencies (sched.runq_latency,
// block.io_latency, lock.contention); and kernel functions (kfunc,
// kretfunc, kprobe, kretprobe) where the kernel allows them, which
// ProbeKernelFuncs asks it (feature.go). Every source has the builtins
// time (Unix ns), cpu, pid, tid, uid, comm, cgroup, kstack and ustack,
// also as task.NAME when the source has a field of that name. Two streams
// join in the probe: FROM a AS x JOIN|FOLLOWED BY b AS y ON x.k = y.k
// (tjoin.go).
//
// Compile turns the query into a Plan, deterministically and without
// privileges, and checks it whole before anything attaches: types (a
// pointer is not a number, str() reads a char *), functions, HAVING.
// Filters, group keys (integers, strings, stack ids, byte arrays, CASE of
// constants, buckets) and associative aggregates (count, sum, min, max,
// avg, hist, lhist, quantiles from log-linear buckets, count_distinct by
// linear counting, the logarithmic sample() of seed 000, topk by
// Space-Saving) run in the probe, into per-CPU hash maps of bounded size;
// two maps are swapped at each interval so the one read is no longer
// written. CASE, IN, BETWEEN, IS NULL, coalesce, CAST to integers,
// DISTINCT and argv[i] run there too. Strings are compared in the probe:
// = and <> with a constant or another string field, and LIKE / NOT LIKE
// with a constant pattern (% and _), by bounded loops (like.go). A
// division by a zero the probe meets skips the event (div_zero).
//
// What the probe cannot compute, and what follows its aggregation
// (expressions over aggregates, HAVING, ORDER BY, LIMIT, kmeans across
// groups), holter's evaluator computes in user space (eval.go, upart.go):
// the probe then sends the referenced fields through a ring buffer, and a
// query without aggregation or ORDER BY hands each row over as its event
// arrives (Plan.PerEvent), with bounded memory. Only a function the
// evaluator lacks sends the user-space part to DuckDB, which checks it at
// compile time; EXPLAIN says which ran what and why. Integer division
// truncates everywhere (as in the probe), and x / 0 in user space is NULL.
//
// WITH live AS (SELECT … FROM source …) SELECT … joins the live part
// with a recording's tables (samples, vitals, …): the live part is planned
// as above; the rest runs each interval in the recording's store, with
// the live rows in place of its name (join.go). RunOptions.Window answers
// over a sliding window of intervals, merging their partials as the fleet
// merges hosts' (merge.go).
//
// Everything that does not fit is counted: keys over the map size
// (map_full), begins evicted from a pairing or join state (evicted),
// stacks (stack_lost), ring buffer records (ring_lost), events skipped by
// a division by zero (div_zero), rows held for DuckDB over their bound
// (dropped), program runs the kernel skipped (missed); ends without a seen
// begin are reported as unmatched. str() reads user memory only from
// char * syscall arguments unless Options.UnsafeRead allows any address;
// strings are bounded (StrSize).
//
// Start loads and attaches a plan; Session.Flush ends an interval; Run
// does both on a schedule.
package tracequery
