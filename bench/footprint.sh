#!/usr/bin/env bash
# The recorder's footprint at defaults (60 s epochs, all vitals, online
# analysis on, budget 1%) on kinds of host, each for MINUTES:
#   quiet   nothing but the machine's own work
#   churn   a new short-lived process every second, a shell job every 10 s
#   fork    churn plus stress-ng --fork 1
#   heavy   stress-ng --fork 2 --exec 1 plus a parallel build (go build -a of
#           holter, again and again)
# For each it prints: store growth per day (DuckDB's used blocks and log
# after the recorder's closing checkpoint, beyond an empty store's,
# extrapolated; a block is 256 KiB, so a short run resolves a quiet host's
# growth coarsely: the precision is printed), the stored bytes per sample,
# the samples stored an epoch once the storage budget's bank is spent and
# what a day of them costs, the RSS of the recorder and its engine
# processes (sampled every second: mean over the second half of the run,
# its PSS, the recorder's and the engines' shares, the last, the peak
# sampled), their CPU (utime+stime per wall second
# as % of the whole machine, over the run and after the first epoch), the
# recorder's garbage collections (GODEBUG=gctrace=1: count, per minute,
# and the live heap at the last one), and per vital per epoch the events,
# the samples the kernel took, the samples stored and those the daily cap
# dropped. Prints figures; asserts nothing. Run as root.
#   MINUTES=5 SCENARIOS="quiet churn fork heavy" bench/footprint.sh
#   HOLTER_BIN=/tmp/holter-old MINUTES=60 SCENARIOS=heavy bench/footprint.sh
# HOLTER_ARGS adds recorder flags (see lib.sh).
source "$(dirname "$0")/lib.sh"
MINUTES=${MINUTES:-5}
SCENARIOS=${SCENARIOS:-quiet churn fork heavy}
ncpu=$(nproc)
tck=$(getconf CLK_TCK)

q() { "$work/holter" query --data "$1" --format csv "$2" | tail -n +2; }
used() { # bytes the stopped store's data occupies: used blocks and log
	q "$1" "SELECT block_size * used_blocks FROM pragma_database_size() LIMIT 1"
}
status_kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status" 2>/dev/null || echo 0; }
# The recorder keeps DuckDB in engine processes of its own (its children,
# started while the store has work): its cost is theirs too.
engines() { pgrep -P "$1" 2>/dev/null || true; }
# cpu_ticks PID: the recorder's CPU ticks, its ended children's (cutime,
# cstime) and its live engine processes'.
cpu_ticks() {
	local t
	t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$1/stat" 2>/dev/null || echo 0)
	for c in $(engines "$1"); do
		t=$((t + $(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null || echo 0)))
	done
	echo "$t"
}
# sample_mem PID: sets mem to the RSS and the PSS (shared pages divided
# among the sharers: the recorder and its engines run one executable) of
# the recorder and its engine processes, summed, in KiB, then the
# recorder's RSS alone and the number of engine processes alive. It runs
# every second, so it starts no process (no command substitution either):
# the bench's own processes would be churn on the quiet host.
kb_of() { # FILE KEY: sets kb to KEY's value in FILE, 0 without one
	local k v rest
	kb=0
	while read -r k v rest; do
		[ "$k" = "$2:" ] && kb=$v && return
	done 2>/dev/null <"$1"
}
sample_mem() {
	local r p own n=0 t c kids
	kb_of "/proc/$1/status" VmRSS
	r=$kb own=$kb
	kb_of "/proc/$1/smaps_rollup" Pss
	p=$kb
	for t in /proc/"$1"/task/*/children; do
		kids=()
		read -r -a kids 2>/dev/null <"$t" || true
		for c in "${kids[@]}"; do
			kb_of "/proc/$c/status" VmRSS
			r=$((r + kb))
			kb_of "/proc/$c/smaps_rollup" Pss
			p=$((p + kb))
			n=$((n + 1))
		done
	done
	mem="$r $p $own $n"
}
# A second's wait without a sleep process: a read that times out on a
# pipe nothing writes to.
exec {tick}<> <(:)

# An empty store: what the schema alone occupies.
start_recorder "$work/empty"
stop_recorder
base=$(used "$work/empty")

# workload SCENARIO: starts it in a process group of its own, prints the
# group's id.
workload() {
	local churn='i=0; while :; do /bin/true; i=$((i + 1));
		[ $((i % 10)) = 0 ] && sh -c "ls -l /usr/bin | wc -l; grep -c . /etc/passwd; date" >/dev/null
		sleep 1; done'
	case $1 in
	quiet) setsid sleep infinity >/dev/null 2>&1 & ;;
	churn) setsid bash -c "$churn" >/dev/null 2>&1 & ;;
	fork) setsid bash -c "stress-ng --fork 1 & $churn" >/dev/null 2>&1 & ;;
	heavy) setsid bash -c "stress-ng --fork 2 --exec 1 &
		while :; do go build -a -o '$work/build-loop' ./cmd/holter; done" >/dev/null 2>&1 & ;;
	*) echo "unknown scenario $1 (quiet, churn, fork, heavy)" >&2; exit 1 ;;
	esac
	echo $!
}

for sc in $SCENARIOS; do
	data="$work/$sc"
	wl=$(workload "$sc")
	sleep 2
	GODEBUG=gctrace=1 start_recorder "$data"
	secs=$((MINUTES * 60))
	t0=$(date +%s.%N)
	c0=$(cpu_ticks "$rec")
	c1="" t1=""
	rss=()
	# Sampled every second: an engine lives a few seconds an epoch, and
	# coarser samples made its share of the mean vary by several MiB.
	for ((s = 1; s <= secs; s++)); do
		read -r -t 1 -u "$tick" _ || true
		sample_mem "$rec"
		rss+=("$mem")
		if [ -z "$c1" ] && [ "$s" -ge 65 ]; then c1=$(cpu_ticks "$rec") t1=$(date +%s.%N); fi
	done
	c2=$(cpu_ticks "$rec")
	t2=$(date +%s.%N)
	spent=$("$work/holter" status --data "$data" --json 2>/dev/null | python3 -c 'import json, sys; s = json.load(sys.stdin); print(s.get("storage_spent_bytes", 0), s.get("storage_bank_bytes", 0))' || echo "0 0")
	hwm=$(status_kb "$rec" VmHWM)
	anon=$(status_kb "$rec" RssAnon) file=$(status_kb "$rec" RssFile)
	stop_recorder
	kill -- -"$wl" 2>/dev/null || true
	sleep 1
	pkill -f -- "$work/build-loop" 2>/dev/null || true

	u=$(used "$data")
	read -r epochs span < <(q "$data" "SELECT count(*), (max(end_ns) - min(start_ns)) / 1e9 FROM epochs" | tr , ' ')
	stored=$(q "$data" "SELECT count(*) FROM samples")
	echo "== $sc: $MINUTES min, $epochs epochs ($span s)"
	awk -v u="$u" -v b="$base" -v s="$span" -v n="$stored" -v bs=262144 'BEGIN {
		d = 86400 / s
		printf "store: %d bytes beyond an empty store (%d); %.1f MB/day (resolution %.1f MB/day); %d samples stored, %.1f bytes a sample\n",
			u - b, b, (u - b) * d / 1e6, bs * d / 1e6, n, n ? (u - b) / n : 0 }'
	# Steady: the samples an epoch stored over the second half of the run
	# (the storage budget's bank is spent in the first epochs), at the
	# bytes a sample this store measured, for a day of such epochs.
	read -r steady elen < <(q "$data" "SELECT avg(n), avg(len) FROM (SELECT e.epoch, (e.end_ns - e.start_ns) / 1e9 AS len,
			count(s.epoch) AS n FROM epochs e LEFT JOIN samples s USING (host, epoch) GROUP BY e.epoch, len
			QUALIFY row_number() OVER (ORDER BY e.epoch DESC) <= (count(*) OVER ()) / 2)" | tr , ' ')
	awk -v u="$u" -v b="$base" -v n="$stored" -v m="$steady" -v l="$elen" 'BEGIN {
		if (n && l) printf "steady: %.0f samples stored an epoch in the second half; at %.1f bytes a sample, %.1f MB/day\n",
			m, (u - b) / n, m * (u - b) / n * 86400 / l / 1e6 }'
	read -r est bank <<<"$spent"
	echo "storage budget: the recorder estimated $est bytes spent (the store grew $((u - base))), $bank left in its bank"
	printf '%s\n' "${rss[@]}" | awk -v h="$hwm" -v an="$anon" -v fi="$file" '{a[NR] = $1; p[NR] = $2; o[NR] = $3; e[NR] = $4; if ($1 > m) m = $1} END {
		for (i = int(NR / 2) + 1; i <= NR; i++) { s += a[i]; sp += p[i]; so += o[i]; if (e[i] > 0) up++; k++ }
		printf "RSS (recorder + engine processes): steady %.1f MiB (mean of the second half; PSS %.1f MiB), last %.1f MiB, peak sampled %.1f MiB\n",
			s / k / 1024, sp / k / 1024, a[NR] / 1024, m / 1024
		printf "  of the steady RSS: the recorder %.1f MiB, its engines %.1f MiB (an engine alive %.0f%% of the time)\n",
			so / k / 1024, (s - so) / k / 1024, 100 * up / k
		printf "  the recorder process alone at the end: anonymous %.1f MiB, files %.1f MiB; its peak (VmHWM) %.1f MiB\n",
			an / 1024, fi / 1024, h / 1024 }'
	awk -v c0="$c0" -v c1="$c1" -v c2="$c2" -v t0="$t0" -v t1="$t1" -v t2="$t2" -v n="$ncpu" -v tck="$tck" 'BEGIN {
		printf "recorder CPU: %.3f%% of the machine (%d CPUs) over the run", 100 * (c2 - c0) / tck / ((t2 - t0) * n), n
		if (c1 != "") printf ", %.3f%% after the first minute", 100 * (c2 - c1) / tck / ((t2 - t1) * n)
		printf "\n" }'
	# The live heap after each collection (gctrace's a->b->c MB: c), its
	# median and maximum; the recorder's last collections, at its exit,
	# are left out.
	ngc=$(grep -cE '^gc [0-9]+ @' "$data.log" || true)
	grep -E '^gc [0-9]+ @' "$data.log" | grep -oE '[0-9]+->[0-9]+->[0-9]+ MB' | cut -d'>' -f3 | cut -d' ' -f1 |
		head -n -2 | sort -n | awk -v n="$ngc" -v m="$MINUTES" '{a[NR] = $1} END {
			printf "GC: %d collections, %.1f a minute, live heap median %d MB, max %d MB\n", n, n / m, a[int((NR + 1) / 2)], a[NR] }'
	dropped=$(q "$data" "SELECT count(*) FROM information_schema.columns WHERE table_name = 'vitals' AND column_name = 'capped'")
	capped=0
	[ "$dropped" = 1 ] && capped="capped"
	echo "per epoch (mean): vital, events, samples taken, stored, dropped by the cap"
	q "$data" "SELECT v.vital, round(avg(v.events)) AS events, round(avg(v.samples)) AS taken,
			round(coalesce(any_value(s.n), 0) / count(*)) AS stored, round(avg($capped)) AS dropped
		FROM vitals v LEFT JOIN (SELECT vital, count(*) AS n FROM samples GROUP BY vital) s USING (vital)
		GROUP BY v.vital ORDER BY v.vital" | column -t -s, | sed 's/^/  /'
	echo "tables (rows): $(q "$data" "SELECT string_agg(table_name || ' ' || estimated_size, ', ' ORDER BY estimated_size DESC)
		FROM duckdb_tables() WHERE estimated_size > 0")"
done
