#!/usr/bin/env bash
# Overhead of request tracing plus kernel accounting on the demo system's
# throughput, holter on versus off (Stardust Table 3: under 6%).
#
# A round runs the demo system (load client → front → middle, burning
# $BURN of CPU per read → storage, O_DIRECT reads and fsynced batched
# writes) twice, in alternating order: "off", the services instrumented
# but exporting nowhere, no recorder; "on", `holter record` at its defaults
# receiving their OTLP spans and accounting their threads from their exec
# (--account-exe); the services' SDKs batch spans for export as the SDK
# does by default (at most $BATCH_TIMEOUT, default 5s as the SDK's
# OTEL_BSP_SCHEDULE_DELAY, or 512 spans). Each run serves the same fixed
# number of requests ($REQUESTS, after $WARMUP) from fresh processes; the
# services are pinned to $SERVICE_CPUS and the load client to $CLIENT_CPUS
# (taskset), the recorder is not pinned, so the machine's other work
# disturbs less. The ratio of a round is on/off throughput; over $ROUNDS
# rounds it prints the median, the spread, a distribution-free confidence
# interval of the median (order statistics, ≥ 95% where the rounds allow)
# and a bootstrap one, and the load average around each run (the machine
# may be shared).
# Other users' BPF tracers (another recorder's vitals on every system call
# and context switch, say) slow the services down in both kinds of run,
# and not evenly: each run counts the tracing programs attached that are
# not its recorder's, and the ratio is also summarised over the rounds
# whose two runs had none ("clean").
#
# The throughput ratio depends on how much of CPU $SERVICE_CPUS the
# machine's other work leaves the services, which on a shared machine
# moves between runs; so each round also prints the CPU time per request
# of the services (user + system: the BPF programs and the OTLP export run
# in their context) and of the recorder, and the medians of their ratios:
# services off/on, and services off / (services on + recorder), the
# throughput ratio of a machine with nothing else to run. Each run also
# prints, per request, the time the services' CPUs spent idle, in iowait,
# in interrupts and stolen by the hypervisor: throughput lost without
# the services' CPU time per request rising shows there.
#
# In "on" runs it prints where the recorder's cost goes: its own CPU time
# during the measured requests, and (BPF_STATS=1, which enables
# kernel.bpf_stats_enabled meanwhile) the run time of the BPF programs it
# loaded, per program. HOLTER_ARGS adds recorder flags, e.g. "--vitals cpu"
# to measure tracing and accounting with the least of the vitals.
# ACCOUNT=exe (default) accounts the demo from exec, ACCOUNT=spans from its
# first spans (the warm-up), ACCOUNT=off not at all (tracing alone).
#
# SETTLE=SECONDS keeps every run under load that much longer before its
# measured requests: the recorder's CPU budget adapts at epoch boundaries
# (after the first epoch, at most a step an epoch), so a short run measures
# a recorder that has not yet raised thresholds or shed vitals it cannot
# afford; e.g. SETTLE=70 HOLTER_ARGS="--epoch 20s" measures the steady
# state after three epochs. In "on" runs it prints the budget's decisions.
#
# PERF=PREFIX profiles every CPU during the measured
# requests (perf record -g, cpu-clock) into PREFIX.off, PREFIX.on, ...
# (of the last round), for perf report.
#
# HOLTER_BASE=PATH (a holter binary, e.g. an older commit's) adds a third
# run to each round, "base", that binary as the recorder, in rotating
# order with the other two: a before/after comparison in the same
# conditions, as the ratio on/base of each round (throughput, and CPU per
# request of services plus recorder), which a shared machine's drift
# between sessions does not blur.
#
# SINK=1 adds a run to each round, "sink": the services export their spans
# to a collector that acknowledges every export and keeps nothing (demo
# sink, not pinned, as the recorder). The instrumentation's own cost (the
# SDK's span snapshots, batching and export) is paid to any OTLP backend;
# on/sink is what holter adds to it: ingest, storage and kernel accounting.
#
# A run that fails (a service exits, a request fails) says why, with the
# end of the log of a service that exited, and drops its round.
#
#   sudo bench/tracing-overhead.sh        (ROUNDS=9 REQUESTS=3000 ...)
for tool in bpftool python3 taskset; do
	command -v $tool >/dev/null || { echo "tracing-overhead: needs $tool (apt-get install bpftool python3 util-linux)" >&2; exit 1; }
done
source "$(dirname "$0")/lib.sh"
trap 'kill $(jobs -p) 2>/dev/null || true; stop_recorder; remove_work' EXIT
ROUNDS=${ROUNDS:-9}
REQUESTS=${REQUESTS:-3000}
WARMUP=${WARMUP:-300}
SETTLE=${SETTLE:-0}
CONC=${CONC:-4}
BURN=${BURN:-2ms}
BATCH_TIMEOUT=${BATCH_TIMEOUT:-5s}
SERVICE_CPUS=${SERVICE_CPUS:-0}
CLIENT_CPUS=${CLIENT_CPUS:-1}
[ "$(nproc)" -ge 2 ] || { SERVICE_CPUS=0 CLIENT_CPUS=0; }
modes=(off on)
if [ -n "${HOLTER_BASE:-}" ]; then
	cp "$HOLTER_BASE" "$work/holter-base"
	modes+=(base)
fi
[ "${SINK:-0}" = 1 ] && modes+=(sink)
go build -o "$work/demo" ./internal/requests/testdata/demo
# free_port: a loopback port nothing listens on now.
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

# service ROLE FLAGS...: starts the demo's ROLE on $SERVICE_CPUS, its
# stderr in $work/ROLE.log.
service() { taskset -c "$SERVICE_CPUS" "$work/demo" "$@" >/dev/null 2>"$work/$1.log" & }

# wait_port ADDR ROLE: waits until ROLE listens on ADDR.
wait_port() {
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/${1%:*}/${1#*:}") 2>/dev/null && return 0
		sleep 0.1
	done
	echo "$2 on $1 did not start: $(cat "$work/$2.log")" >&2
	exit 1
}

# alive WHEN: fails, saying which and how, if a process of the run's
# (the keys of roles, which names them; logs has their stderr) has exited.
alive() {
	local p status
	for p in "${!roles[@]}"; do
		kill -0 "$p" 2>/dev/null && continue
		status=0
		wait "$p" || status=$?
		echo "${roles[$p]} (pid $p) exited with status $status $1; its log ends:" >&2
		tail -n 20 "${logs[$p]}" | sed 's/^/    /' >&2
		exit 1
	done
}

load1() { cut -d' ' -f1 /proc/loadavg; }

# other_tracers [PID]: BPF programs attached to tracepoints, perf events or
# probes now that process PID (the recorder) does not hold.
other_tracers() {
	local mine=""
	[ -n "${1:-}" ] && mine=$(cat /proc/"$1"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
mine = {int(x) for x in sys.argv[1].split()}
kinds = {"tracing", "perf_event", "raw_tracepoint", "tracepoint", "kprobe"}
print(sum(1 for p in json.load(sys.stdin) if p.get("type") in kinds and p["id"] not in mine))
' "$mine"
}

# proc_cpu PID: its user + system time in clock ticks.
proc_cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# cpu_times CPUS (taskset's list form, e.g. 0,2-3): the idle, iowait, irq + softirq
# and steal clock ticks of those CPUs so far, from /proc/stat.
cpu_times() {
	awk -v list="$1" 'BEGIN {
		n = split(list, parts, ",")
		for (i = 1; i <= n; i++) {
			if (split(parts[i], r, "-") == 2) { for (c = r[1]; c <= r[2]; c++) want["cpu" c] = 1 }
			else want["cpu" parts[i]] = 1
		}
	}
	$1 in want { idle += $5; iowait += $6; irq += $7 + $8; steal += $9 }
	END { print idle, iowait, irq, steal }' /proc/stat
}

# bpf_cost PID SECONDS: run time of the BPF programs process PID holds
# (its file descriptors' prog_id), per program and in all, as a share of
# one CPU over SECONDS.
bpf_cost() {
	local ids
	ids=$(cat /proc/"$1"/fdinfo/* 2>/dev/null | sed -n 's/^prog_id:[[:space:]]*//p' | sort -u | tr '\n' ' ')
	bpftool -j prog show | python3 -c '
import json, sys
ids, secs = {int(x) for x in sys.argv[1].split()}, float(sys.argv[2])
progs = [p for p in json.load(sys.stdin) if p["id"] in ids and p.get("run_cnt")]
total = sum(p["run_time_ns"] for p in progs)
for p in sorted(progs, key=lambda p: -p["run_time_ns"])[:8]:
    print("    bpf %-22s %9d calls %6.0f ns/call %7.1f ms" % (p["name"], p["run_cnt"], p["run_time_ns"] / p["run_cnt"], p["run_time_ns"] / 1e6))
print("    bpf in all: %.1f ms, %.1f%% of one CPU, %.0f us per request" % (total / 1e6, 100 * total / 1e9 / secs, total / 1e3 / int(sys.argv[3])))
' "$ids" "$2" "$REQUESTS"
}

# run MODE: prints "requests/s load-before load-after" of one run.
run() {
	local mode=$1 otlp=() pids=() collector=""
	local -A roles logs
	[ "$mode" = base ] && recorder_exe=$work/holter-base
	local grpc front middle storage
	# This runs in a subshell: on any failure, take its processes down.
	trap 'kill "${pids[@]}" 2>/dev/null || true; stop_recorder' EXIT
	grpc=127.0.0.1:$(free_port) front=127.0.0.1:$(free_port) middle=127.0.0.1:$(free_port) storage=127.0.0.1:$(free_port)
	if [ "$mode" = sink ]; then
		"$work/demo" sink -addr "$grpc" >/dev/null 2>"$work/sink.log" &
		collector=$!
		pids+=("$collector")
		roles[$collector]="demo sink" logs[$collector]=$work/sink.log
		wait_port "$grpc" sink
	elif [ "$mode" != off ]; then
		rm -rf "$work/data"
		local acct=()
		case ${ACCOUNT:-exe} in
		exe) acct=(--account-exe "$work/demo") ;;
		off) acct=(--account=false) ;;
		esac
		start_recorder "$work/data" --otlp-grpc "$grpc" --otlp-http off "${acct[@]}" >/dev/null
		collector=$rec
		roles[$rec]="holter record" logs[$rec]=$work/data.log
	fi
	[ -n "$collector" ] && otlp=(-otlp-grpc "$grpc" -batch-timeout "$BATCH_TIMEOUT")
	service storage -addr "$storage" -dir "$work" "${otlp[@]}"
	pids+=($!) roles[$!]="demo storage" logs[$!]=$work/storage.log
	service middle -addr "$middle" -storage "http://$storage" -burn "$BURN" "${otlp[@]}"
	pids+=($!) roles[$!]="demo middle" logs[$!]=$work/middle.log
	service front -addr "$front" -middle "http://$middle" "${otlp[@]}"
	pids+=($!) roles[$!]="demo front" logs[$!]=$work/front.log
	wait_port "$storage" storage
	wait_port "$middle" middle
	wait_port "$front" front
	taskset -c "$CLIENT_CPUS" "$work/demo" load -front "http://$front" -requests "$WARMUP" -concurrency "$CONC" "${otlp[@]}" >/dev/null ||
		{ alive "during the warm-up"; echo "the warm-up's load failed" >&2; exit 1; }
	if ((SETTLE > 0)); then
		# Under load for SETTLE s more, in every mode alike, so that the
		# recorder's budget has adapted by the measured requests.
		taskset -c "$CLIENT_CPUS" "$work/demo" load -front "http://$front" -requests 1000000000 -concurrency "$CONC" "${otlp[@]}" >/dev/null &
		local settler=$!
		sleep "$SETTLE"
		kill "$settler"
		wait "$settler" 2>/dev/null || true
	fi
	local before after cpu0=0 svc0=0 svc1=0 reccpu=0 p others
	[ -n "$rec" ] && [ "${BPF_STATS:-0}" = 1 ] && sysctl -qw kernel.bpf_stats_enabled=1
	others=$(other_tracers "$rec")
	before=$(load1)
	alive "before the measured requests"
	[ -n "$collector" ] && cpu0=$(proc_cpu "$collector")
	for p in "${pids[@]}"; do svc0=$((svc0 + $(proc_cpu "$p"))); done
	local t0 t1
	t0=$(cpu_times "$SERVICE_CPUS")
	local perf=""
	if [ -n "${PERF:-}" ]; then
		perf record -q -g -a -e cpu-clock -o "$PERF.$mode" 2>/dev/null &
		perf=$!
	fi
	taskset -c "$CLIENT_CPUS" "$work/demo" load -front "http://$front" -requests "$REQUESTS" -concurrency "$CONC" "${otlp[@]}" >"$work/load.json" || alive "during the measured requests"
	[ -n "$perf" ] && { kill -INT "$perf"; wait "$perf" || true; }
	after=$(load1)
	t1=$(cpu_times "$SERVICE_CPUS")
	others=$((others > $(other_tracers "$rec") ? others : $(other_tracers "$rec")))
	alive "during the measured requests"
	[ -n "$collector" ] && reccpu=$(($(proc_cpu "$collector") - cpu0))
	for p in "${pids[@]}"; do svc1=$((svc1 + $(proc_cpu "$p"))); done
	local hz
	hz=$(getconf CLK_TCK)
	# Time the services' CPUs did not give them: idle (they all waited:
	# on the disk, the client, each other), interrupts, and the
	# hypervisor's steal, which a thread's CPU clock leaves out.
	echo "$t0 $t1" | awk -v hz="$hz" -v n="$REQUESTS" -v m="$mode" '{
		printf "    %s services'"'"' CPUs, ms per request: idle %.3f, iowait %.3f, irq %.3f, steal %.3f\n", m,
			1000*($5-$1)/hz/n, 1000*($6-$2)/hz/n, 1000*($7-$3)/hz/n, 1000*($8-$4)/hz/n }' >&2
	if [ -n "$collector" ]; then
		local secs
		secs=$(sed -n 's/.*"seconds": \([0-9.]*\).*/\1/p' "$work/load.json")
		awk -v c="$reccpu" -v hz="$(getconf CLK_TCK)" -v s="$secs" \
			-v n="$REQUESTS" -v m="$mode" 'BEGIN{printf "    %s collector process: %.2f s of CPU in the %.2f s of requests (%.1f%% of one CPU), %.2f ms per request\n", m, c/hz, s, 100*c/hz/s, 1000*c/hz/n}' >&2
		if [ -n "$rec" ] && [ "${BPF_STATS:-0}" = 1 ]; then
			sysctl -qw kernel.bpf_stats_enabled=0
			bpf_cost "$rec" "$secs" >&2
		fi
	fi
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || true
	if [ -n "$rec" ]; then
		stop_recorder
		grep -h 'budget:' "$work/data.log" | sed 's/^/    /' >&2 || true
		"$work/holter" query --data "$work/data" --format csv "SELECT (SELECT count(*) FROM thread_activity),
			(SELECT count(DISTINCT trace_id) FROM spans), (SELECT count(*) FROM span_accounting WHERE accounted)" |
			awk -F, 'NR == 2 && $2 > 0 {printf "    store: %d thread_activity rows for %d requests (%.1f per request), %d spans accounted\n", $1, $2, $1 / $2, $3}' >&2
		"$work/holter" query --data "$work/data" --format csv "SELECT kind, count(*) FROM thread_activity GROUP BY kind ORDER BY 2 DESC" |
			awk -F, 'NR > 1 {printf "%s %s %d", (NR == 2 ? "    rows by kind:" : ","), $1, $2} END {print ""}' >&2
	fi
	grep -q '"errors": 0' "$work/load.json" || { echo "requests failed: $(cat "$work/load.json")" >&2; exit 1; }
	echo "$(sed -n 's/.*"per_second": \([0-9.]*\).*/\1/p' "$work/load.json") $before $after" \
		"$(awk -v c="$((svc1 - svc0))" -v r="$reccpu" -v hz="$hz" -v n="$REQUESTS" 'BEGIN{printf "%.4f %.4f", 1000*c/hz/n, 1000*r/hz/n}') $others"
}

echo "demo system: $REQUESTS requests per run after $WARMUP and ${SETTLE} s more of load, $CONC clients, $BURN of CPU per read; recorder flags: ${HOLTER_ARGS:-defaults}, accounting ${ACCOUNT:-exe};" \
	"services on CPUs $SERVICE_CPUS, client on CPUs $CLIENT_CPUS, $(nproc) CPUs; load now $(load1)"
ratios=() svcratios=() costratios=() clean=() baseratios=() onbase=() onbasecpu=() sinkoff=() onsink=() sinksvc=()
declare -A rate lb la svc reccpu others
dropped=0
for i in $(seq "$ROUNDS"); do
	# The runs of a round in rotating order: off first, then on first, ...
	for j in $(seq 0 $((${#modes[@]} - 1))); do
		m=${modes[$(((i - 1 + j) % ${#modes[@]}))]}
		# A failed run (it said why above) drops its round, not the others.
		if ! read -r "rate[$m]" "lb[$m]" "la[$m]" "svc[$m]" "reccpu[$m]" "others[$m]" < <(run "$m"); then
			echo "round $i: the $m run failed; round dropped"
			dropped=$((dropped + 1))
			continue 2
		fi
	done
	off=${rate[off]} ob=${lb[off]} oa=${la[off]} os=${svc[off]} oo=${others[off]}
	on=${rate[on]} nb=${lb[on]} na=${la[on]} ns=${svc[on]} nr=${reccpu[on]} no=${others[on]}
	r=$(awk -v a="$on" -v b="$off" 'BEGIN{printf "%.4f", a/b}')
	echo "round $i: off $off req/s (load $ob→$oa), on $on req/s (load $nb→$na), on/off $r;" \
		"CPU per request: services off $os ms, on $ns ms, recorder $nr ms; others' tracers off $oo, on $no"
	if [ -n "${HOLTER_BASE:-}" ]; then
		rb=$(awk -v a="${rate[base]}" -v b="$off" 'BEGIN{printf "%.4f", a/b}')
		rob=$(awk -v a="$on" -v b="${rate[base]}" 'BEGIN{printf "%.4f", a/b}')
		rcpu=$(awk -v s="$ns" -v r="$nr" -v bs="${svc[base]}" -v br="${reccpu[base]}" 'BEGIN{printf "%.4f", (s+r)/(bs+br)}')
		echo "  base ${rate[base]} req/s (load ${lb[base]}→${la[base]}), base/off $rb, on/base $rob;" \
			"CPU per request: services base ${svc[base]} ms, recorder ${reccpu[base]} ms, (services + recorder) on/base $rcpu; others' tracers ${others[base]}"
		baseratios+=("$rb") onbase+=("$rob") onbasecpu+=("$rcpu")
	fi
	if [ "${SINK:-0}" = 1 ]; then
		rs=$(awk -v a="$on" -v b="${rate[sink]}" 'BEGIN{printf "%.4f", a/b}')
		ks=$(awk -v a="${rate[sink]}" -v b="$off" 'BEGIN{printf "%.4f", a/b}')
		echo "  sink ${rate[sink]} req/s (load ${lb[sink]}→${la[sink]}), sink/off $ks, on/sink $rs;" \
			"CPU per request: services sink ${svc[sink]} ms, sink process ${reccpu[sink]} ms"
		sinkoff+=("$ks") onsink+=("$rs")
		sinksvc+=("$(awk -v a="${svc[sink]}" -v b="$ns" 'BEGIN{printf "%.4f", a/b}')")
	fi
	ratios+=("$r")
	((oo + no == 0)) && clean+=("$r")
	svcratios+=("$(awk -v a="$os" -v b="$ns" 'BEGIN{printf "%.4f", a/b}')")
	costratios+=("$(awk -v a="$os" -v b="$ns" -v r="$nr" 'BEGIN{printf "%.4f", a/(b+r)}')")
done
((${#ratios[@]})) || { echo "no round completed" >&2; exit 1; }
printf 'CPU per request, median over rounds: services off/on %s; services off / (services on + recorder) %s\n' \
	"$(printf '%s\n' "${svcratios[@]}" | median_spread)" "$(printf '%s\n' "${costratios[@]}" | median_spread)"
if [ -n "${HOLTER_BASE:-}" ]; then
	printf 'base: on/off throughput of the base recorder %s; on/base throughput %s; (services + recorder) CPU per request on/base %s\n' \
		"$(printf '%s\n' "${baseratios[@]}" | median_spread)" "$(printf '%s\n' "${onbase[@]}" | median_spread)" \
		"$(printf '%s\n' "${onbasecpu[@]}" | median_spread)"
fi
if [ "${SINK:-0}" = 1 ]; then
	printf 'sink: throughput sink/off (the instrumentation exporting to a collector that keeps nothing) %s; services CPU per request sink/on %s\n' \
		"$(printf '%s\n' "${sinkoff[@]}" | median_spread)" "$(printf '%s\n' "${sinksvc[@]}" | median_spread)"
fi
if ((${#clean[@]})); then
	printf 'on/off throughput over the %d of %d rounds with no other tracer attached: %s\n' "${#clean[@]}" "$ROUNDS" \
		"$(printf '%s\n' "${clean[@]}" | median_spread)"
else
	echo "no round ran without other tracers attached"
fi

# summarize LABEL: reads a ratio per round; prints their median, spread,
# and order-statistic and bootstrap 95% intervals of the median.
summarize() {
	sort -g | awk -v label="$1" '
function sift(a, i, n,   c, t) {
	while ((c = 2 * i) <= n) {
		if (c < n && a[c+1] > a[c]) c++
		if (a[i] >= a[c]) return
		t = a[i]; a[i] = a[c]; a[c] = t; i = c
	}
}
function heapsort(a, n,   i, t) {
	for (i = int(n / 2); i >= 1; i--) sift(a, i, n)
	for (i = n; i > 1; i--) { t = a[1]; a[1] = a[i]; a[i] = t; sift(a, 1, i - 1) }
}
function median(v, n,   s, i, j, t) {
	for (i = 1; i <= n; i++) s[i] = v[i]
	for (i = 2; i <= n; i++) { t = s[i]; for (j = i - 1; j >= 1 && s[j] > t; j--) s[j+1] = s[j]; s[j+1] = t }
	return (n % 2) ? s[(n+1)/2] : (s[n/2] + s[n/2+1]) / 2
}
{ x[NR] = $1 }
END {
	n = NR
	m = median(x, n)
	# P(Bin(n, 1/2) < k): [x(k), x(n-k+1)] covers the median with 1 - 2 P.
	k = 1; cov = 1 - 2 * 0.5^n
	c = 1; tail = 0.5^n
	for (j = 1; j < n / 2; j++) {
		c = c * (n - j + 1) / j; t = tail + c * 0.5^n
		if (1 - 2 * t < 0.95) break
		tail = t; k = j + 1; cov = 1 - 2 * tail
	}
	srand(1)
	for (b = 1; b <= 4000; b++) {
		for (i = 1; i <= n; i++) y[i] = x[int(rand() * n) + 1]
		bm[b] = median(y, n)
	}
	heapsort(bm, 4000)
	printf "median %s throughput %.4f: overhead %.1f%%; spread %.4f..%.4f over %d rounds\n", label, m, (1 - m) * 100, x[1], x[n], n
	printf "  order-statistic interval of the median [x(%d), x(%d)] = %.4f..%.4f (coverage %.1f%%): overhead %.1f%%..%.1f%%\n",
		k, n - k + 1, x[k], x[n-k+1], cov * 100, (1 - x[n-k+1]) * 100, (1 - x[k]) * 100
	printf "  bootstrap 95%% interval of the median %.4f..%.4f: overhead %.1f%%..%.1f%%\n",
		bm[100], bm[3900], (1 - bm[3900]) * 100, (1 - bm[100]) * 100
}'
}
printf '%s\n' "${ratios[@]}" | summarize on/off
if [ "${SINK:-0}" = 1 ]; then
	echo "holter's own cost, on against the services exporting to a collector that keeps nothing:"
	printf '%s\n' "${onsink[@]}" | summarize on/sink
fi
((dropped)) && echo "$dropped of $ROUNDS rounds dropped: a run failed (see above)"
echo "load average now $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) CPUs (other users' work shares the machine)"
