// Package tracequery is holter's live tracing: a SQL subset over probe
// sources, compiled into eBPF programs generated at run time with
// cilium/ebpf/asm (no clang on the host), after Fay's query splitting
// (seed 001, §4.2, Figure 10) and SystemTap's probe points (seed 003).
//
// A query names one source (holter trace --list shows them):
// tracepoint.GROUP.EVENT, syscall.NAME and syscall.any (arguments, ret,
// latency), uprobe."PATH".SYMBOL (arg0..arg5, ret, latency),
// usdt."PATH".PROVIDER.NAME (operands from the ELF notes), profile.hz_N,
// interval.DURATION, and paired latencies (sched.runq_latency,
// block.io_latency, lock.contention). Every source has the builtins time,
// cpu, pid, tid, uid, comm, cgroup, kstack and ustack. Kernel function
// sources (kprobe, kfunc) are feature-probed and reported unavailable.
//
// Compile turns the query into a Plan, deterministically and without
// privileges. Filters, group keys (integers, strings, stack ids, buckets)
// and associative aggregates (count, sum, min, max, avg, hist, lhist,
// quantiles from log-linear buckets, count_distinct by linear counting,
// and the logarithmic sample() of seed 000) run in the probe, into per-CPU
// hash maps of bounded size; two maps are swapped at each interval so the
// one read is no longer written. A paired source keeps its begin in a
// bounded hash keyed by thread or by the event's identity until its end.
// Strings are compared in the probe: = and <> with a constant or another
// string field, and LIKE / NOT LIKE with a constant pattern (% and _),
// by bounded loops over the NUL-terminated buffer (like.go).
// What the probe cannot compute (DuckDB functions, float arithmetic)
// turns the plan into streaming mode: the probe sends the referenced
// fields through a ring buffer and DuckDB computes the whole query, and
// EXPLAIN says why; the aggregates DuckDB lacks (hist, lhist, quantiles,
// sample) are computed there the probe's way. ORDER BY, LIMIT, HAVING and expressions over
// aggregates always run in DuckDB over the merged partials.
//
// WITH live AS (SELECT … FROM source …) SELECT … joins the live part
// with a recording's tables (samples, vitals, …): the live part is planned
// as above; the rest runs each interval in the recording's store, with
// the live rows in place of its name (join.go).
//
// Everything that does not fit is counted: keys over the map size
// (map_full), begins over the pairing map (stash_full), stacks
// (stack_lost), ring buffer records (ring_lost), program runs the kernel
// skipped (missed); ends without a seen begin are reported as unmatched.
// str() reads user memory only from char * syscall arguments unless
// Options.UnsafeRead allows any address; strings are bounded (StrSize).
//
// Start loads and attaches a plan; Session.Flush ends an interval.
package tracequery
