package server

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/sysname"
)

// The endpoints below are what the web UI uses; openapi.yaml describes
// them. Each reads its parameters through params, so a bad one is a 400
// that names it, and each answers from the store with parameterised SQL.

// maxPoints is how many points per series the vitals endpoint aims at
// when it picks the timescale itself: enough for a screen's width.
const maxPoints = 1000

// Bounds on what one answer carries.
const (
	defaultSampleLimit = 200
	maxSampleLimit     = 5000
	maxFlameStacks     = 20000
	maxTopLimit        = 100
)

type api struct {
	store Querier
	d     dialect
	// stackCache holds the frames of the stacks findings name.
	stackCache *findings.Stacks
}

// query runs SQL with args. The SQL is ours and the parameters were
// checked before, so a failure here is the server's (500), not the user's,
// unless the store says otherwise (an unreachable fleet store is a 502).
func (a *api) query(ctx context.Context, sql string, args ...any) (*store.Result, error) {
	return a.store.Query(ctx, sql, args...)
}

// handle wraps an endpoint: it returns the answer or an error, which
// is a 500 unless it is an httpError with its own code (params' are 400s).
func handle(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := f(r)
		if err != nil {
			writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

// errorCode is an httpError's code, else def (500 unless given).
func errorCode(err error, def ...int) int {
	var he httpError
	if errors.As(err, &he) {
		return he.code
	}
	if len(def) > 0 {
		return def[0]
	}
	return http.StatusInternalServerError
}

type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }

// hosts returns the hosts a request is about: the one named, which must
// have recorded, or else every host that has, in name order.
func (a *api) hosts(ctx context.Context, name string) ([]string, error) {
	if name != "" {
		res, err := a.query(ctx, `SELECT 1 FROM epochs WHERE host = $1 LIMIT 1`, name)
		if err != nil {
			return nil, err
		}
		if len(res.Rows) == 0 {
			return nil, unknownHost(name)
		}
		return []string{name}, nil
	}
	res, err := a.query(ctx, `SELECT DISTINCT host FROM epochs ORDER BY host`)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, row := range res.Rows {
		out = append(out, asString(row[0]))
	}
	return out, nil
}

func unknownHost(name string) error {
	return httpError{http.StatusNotFound, fmt.Sprintf("host: nothing recorded for host %q", name)}
}

// inList is "col IN ($k, …)" over vals, their arguments appended to args.
// vals must not be empty.
func inList(col string, vals []string, args *[]any) string {
	ph := make([]string, len(vals))
	for i, v := range vals {
		*args = append(*args, v)
		ph[i] = fmt.Sprintf("$%d", len(*args))
	}
	return col + " IN (" + strings.Join(ph, ", ") + ")"
}

// epochSpan is the epochs of one host that a time range covers.
type epochSpan struct {
	host   string
	lo, hi int64
}

// epochSpans returns, per host, the epochs whose middle falls in
// [from, to): clicking an epoch or brushing a range must not pick up its
// neighbours, and the UI's times are doubles, a few hundred nanoseconds
// off. Hosts without such an epoch are left out.
func (a *api) epochSpans(ctx context.Context, hosts []string, from, to int64) ([]epochSpan, error) {
	args := []any{from, to}
	res, err := a.query(ctx, `SELECT host, min(epoch), max(epoch) FROM epochs
		WHERE (start_ns + end_ns) / 2 >= $1 AND (start_ns + end_ns) / 2 < $2 AND `+inList("host", hosts, &args)+`
		GROUP BY host ORDER BY host`, args...)
	if err != nil {
		return nil, err
	}
	var out []epochSpan
	for _, row := range res.Rows {
		out = append(out, epochSpan{asString(row[0]), asInt(row[1]), asInt(row[2])})
	}
	return out, nil
}

// spanCond is the condition on a table keyed by host and epoch that keeps
// the rows of spans, their arguments appended to args.
func spanCond(spans []epochSpan, args *[]any) string {
	ors := make([]string, len(spans))
	for i, s := range spans {
		*args = append(*args, s.host, s.lo, s.hi)
		n := len(*args)
		ors[i] = fmt.Sprintf("(host = $%d AND epoch BETWEEN $%d AND $%d)", n-2, n-1, n)
	}
	return "(" + strings.Join(ors, " OR ") + ")"
}

// HostInfo is what one host recorded.
type HostInfo struct {
	Host      string `json:"host"`
	FirstNs   int64  `json:"first_ns"`
	LastNs    int64  `json:"last_ns"`
	Epochs    int64  `json:"epochs"`
	LastEpoch int64  `json:"last_epoch"`
	EpochNs   int64  `json:"epoch_ns"` // the median epoch length
}

// hostInfos is what each host recorded, in name order.
func (a *api) hostInfos(ctx context.Context) ([]HostInfo, error) {
	res, err := a.query(ctx, `SELECT host, min(start_ns), max(end_ns), count(*), max(epoch), `+a.d.median("end_ns - start_ns")+`
		FROM epochs GROUP BY host ORDER BY host`)
	if err != nil {
		return nil, err
	}
	out := []HostInfo{}
	for _, r := range res.Rows {
		out = append(out, HostInfo{Host: asString(r[0]), FirstNs: asInt(r[1]), LastNs: asInt(r[2]), Epochs: asInt(r[3]),
			LastEpoch: asInt(r[4]), EpochNs: asInt(r[5])})
	}
	return out, nil
}

// typicalEpochs is the median length of the epochs of each of hosts that
// overlap [from, to), in nanoseconds, and the longest of them: what an
// answer about the range says, whatever was recorded since.
func (a *api) typicalEpochs(ctx context.Context, hosts []string, from, to int64) (map[string]int64, int64, error) {
	args := []any{from, to}
	res, err := a.query(ctx, `SELECT host, `+a.d.median("end_ns - start_ns")+` FROM epochs
		WHERE end_ns > $1 AND start_ns < $2 AND `+inList("host", hosts, &args)+` GROUP BY host`, args...)
	if err != nil {
		return nil, 0, err
	}
	out, longest := map[string]int64{}, int64(0)
	for _, r := range res.Rows {
		out[asString(r[0])] = asInt(r[1])
		longest = max(longest, asInt(r[1]))
	}
	return out, longest, nil
}

// Overview is what the UI needs first: what is recorded, and where. Host
// is the host asked for, or the only one; empty, the figures are the
// fleet's (every host's epochs). PerHost is what each host recorded.
type Overview struct {
	Hosts      []string       `json:"hosts"`
	Host       string         `json:"host"`
	Fleet      bool           `json:"fleet"`
	FirstNs    int64          `json:"first_ns"`
	LastNs     int64          `json:"last_ns"`
	Epochs     int64          `json:"epochs"`
	LastEpoch  int64          `json:"last_epoch"`
	EpochNs    int64          `json:"epoch_ns"`
	Live       bool           `json:"live"`
	Vitals     []VitalInfo    `json:"vitals"`
	Timescales []TimescaleDef `json:"timescales"`
	PerHost    []HostInfo     `json:"per_host"`
}

// VitalInfo names a vital and the unit of its weights.
type VitalInfo struct {
	Name     string `json:"name"`
	Unit     string `json:"unit"`
	Recorded bool   `json:"recorded"`
}

// TimescaleDef is one resolution the vitals endpoint serves.
type TimescaleDef struct {
	Name    string `json:"name"`
	WidthNs int64  `json:"width_ns"`
}

func (a *api) overview(live bool) func(r *http.Request) (any, error) {
	return func(r *http.Request) (any, error) {
		p := newParams(r.URL.Query(), "host")
		hostName := p.str("host")
		if p.err != nil {
			return nil, p.err
		}
		ctx := r.Context()
		infos, err := a.hostInfos(ctx)
		if err != nil {
			return nil, err
		}
		ov := Overview{Hosts: []string{}, Host: hostName, Live: live, Fleet: isFleet(a.store), PerHost: infos}
		var chosen []HostInfo
		for _, hi := range infos {
			ov.Hosts = append(ov.Hosts, hi.Host)
			if hostName == "" || hi.Host == hostName {
				chosen = append(chosen, hi)
			}
		}
		if hostName != "" && len(chosen) == 0 {
			return nil, unknownHost(hostName)
		}
		if len(infos) == 1 {
			ov.Host = infos[0].Host
		}
		var args []any
		var lasts []string
		for i, hi := range chosen {
			if i == 0 || hi.FirstNs < ov.FirstNs {
				ov.FirstNs = hi.FirstNs
			}
			ov.LastNs, ov.LastEpoch, ov.EpochNs = max(ov.LastNs, hi.LastNs), max(ov.LastEpoch, hi.LastEpoch), max(ov.EpochNs, hi.EpochNs)
			ov.Epochs += hi.Epochs
			args = append(args, hi.Host, hi.LastEpoch)
			lasts = append(lasts, fmt.Sprintf("(host = $%d AND epoch = $%d)", len(args)-1, len(args)))
		}
		recorded := map[string]bool{}
		if len(lasts) > 0 {
			vs, err := a.query(ctx, `SELECT DISTINCT vital FROM vitals WHERE `+strings.Join(lasts, " OR "), args...)
			if err != nil {
				return nil, err
			}
			for _, row := range vs.Rows {
				recorded[asString(row[0])] = true
			}
		}
		for _, v := range vitalNames() {
			ov.Vitals = append(ov.Vitals, VitalInfo{Name: v, Unit: vitalUnit(v), Recorded: recorded[v]})
		}
		ov.Timescales = append(ov.Timescales, TimescaleDef{"epoch", ov.EpochNs})
		for _, ts := range store.Timescales {
			ov.Timescales = append(ov.Timescales, TimescaleDef{ts.Name, ts.Width.Nanoseconds()})
		}
		return ov, nil
	}
}

// Series is one vital of one host over time. Seconds is how much recorded
// time each point covers, so a point's rate is Weight/Seconds whatever the
// timescale. Threshold is the vital's sampling threshold t in an epoch,
// which the CPU budget raises above the configured one to throttle it; the
// rollups do not keep it, so at a coarser timescale it is 0, unknown.
type Series struct {
	Vital     string    `json:"vital"`
	Host      string    `json:"host"`
	Unit      string    `json:"unit"`
	T         []int64   `json:"t"`
	Weight    []float64 `json:"weight"`
	Events    []float64 `json:"events"`
	Samples   []float64 `json:"samples"`
	Lost      []float64 `json:"lost"`
	Seconds   []float64 `json:"seconds"`
	Threshold []float64 `json:"threshold"`
}

func (s *Series) add(t int64, weight, events, samples, lost, seconds, threshold float64) {
	s.T = append(s.T, t)
	s.Weight = append(s.Weight, weight)
	s.Events = append(s.Events, events)
	s.Samples = append(s.Samples, samples)
	s.Lost = append(s.Lost, lost)
	s.Seconds = append(s.Seconds, seconds)
	s.Threshold = append(s.Threshold, threshold)
}

// VitalsAnswer is the vitals of a range at one timescale: one series per
// vital and host, vital by vital, so several hosts' series of a vital can
// be overlaid on one time axis. Host is the host asked for (or the only
// one); empty, the series are every host's.
type VitalsAnswer struct {
	Host      string    `json:"host"`
	Hosts     []string  `json:"hosts"`
	From      int64     `json:"from"`
	To        int64     `json:"to"`
	Timescale string    `json:"timescale"`
	BucketNs  int64     `json:"bucket_ns"`
	Series    []*Series `json:"series"`
}

// pickTimescale is the finest timescale that shows span in at most
// maxPoints points.
func pickTimescale(span, epochNs int64) string {
	if epochNs <= 0 || span/epochNs <= maxPoints {
		return "epoch"
	}
	for _, ts := range store.Timescales {
		if span/ts.Width.Nanoseconds() <= maxPoints {
			return ts.Name
		}
	}
	return store.Timescales[len(store.Timescales)-1].Name
}

func timescaleNames() []string {
	names := []string{"auto", "epoch"}
	for _, ts := range store.Timescales {
		names = append(names, ts.Name)
	}
	return names
}

func (a *api) vitals(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), "from", "to", "timescale", "vital", "host")
	from, to := p.timeRange("from", "to")
	timescale := p.oneOf("timescale", "auto", timescaleNames()...)
	vitals := p.vitals("vital")
	hostName := p.str("host")
	if p.err != nil {
		return nil, p.err
	}
	ctx := r.Context()
	hosts, err := a.hosts(ctx, hostName)
	if err != nil {
		return nil, err
	}
	ans := &VitalsAnswer{Host: hostName, Hosts: hosts, From: from, To: to, Series: []*Series{}}
	if len(hosts) == 1 {
		ans.Host = hosts[0]
	}
	if len(hosts) == 0 {
		ans.Timescale, ans.Hosts = "epoch", []string{}
		return ans, nil
	}
	epochNs, longest, err := a.typicalEpochs(ctx, hosts, from, to)
	if err != nil {
		return nil, err
	}
	if timescale == "auto" {
		timescale = pickTimescale(to-from, longest)
	}
	ans.Timescale = timescale
	series := map[[2]string]*Series{}
	for _, v := range vitals {
		for _, h := range hosts {
			s := &Series{Vital: v, Host: h, Unit: vitalUnit(v), T: []int64{}, Weight: []float64{}, Events: []float64{},
				Samples: []float64{}, Lost: []float64{}, Seconds: []float64{}, Threshold: []float64{}}
			series[[2]string{v, h}] = s
			ans.Series = append(ans.Series, s)
		}
	}
	if timescale == "epoch" {
		ans.BucketNs = longest
		return ans, a.epochVitals(ctx, hosts, vitals, from, to, series)
	}
	var width int64
	for _, ts := range store.Timescales {
		if ts.Name == timescale {
			width = ts.Width.Nanoseconds()
		}
	}
	ans.BucketNs = width
	args := []any{timescale, from - width, to}
	res, err := a.query(ctx, `SELECT vital, host, bucket_ns, weight_sum, events, samples, lost, epochs
		FROM rollups
		WHERE timescale = $1 AND bucket_ns > $2 AND bucket_ns < $3 AND `+inList("host", hosts, &args)+`
			AND `+inList("vital", vitals, &args)+`
		ORDER BY vital, host, bucket_ns`, args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		host := asString(row[1])
		series[[2]string{asString(row[0]), host}].add(asInt(row[2]), asFloat(row[3]), asFloat(row[4]), asFloat(row[5]),
			asFloat(row[6]), asFloat(row[7])*float64(epochNs[host])/1e9, 0)
	}
	return ans, nil
}

// epochVitals fills series with the vitals of each epoch of hosts that
// overlaps [from, to). The epochs' times and the vitals are read apart
// and joined here: one statement per table reads the same in every
// dialect.
func (a *api) epochVitals(ctx context.Context, hosts, vitals []string, from, to int64, series map[[2]string]*Series) error {
	args := []any{from, to}
	eps, err := a.query(ctx, `SELECT host, epoch, start_ns, end_ns FROM epochs
		WHERE end_ns > $1 AND start_ns < $2 AND `+inList("host", hosts, &args)+` ORDER BY host, epoch`, args...)
	if err != nil {
		return err
	}
	type times struct{ start, end int64 }
	epochs := map[string]map[int64]times{}
	var spans []epochSpan
	for _, row := range eps.Rows {
		h, e := asString(row[0]), asInt(row[1])
		if epochs[h] == nil {
			epochs[h] = map[int64]times{}
			spans = append(spans, epochSpan{h, e, e})
		}
		epochs[h][e] = times{asInt(row[2]), asInt(row[3])}
		spans[len(spans)-1].hi = e
	}
	if len(spans) == 0 {
		return nil
	}
	args = nil
	res, err := a.query(ctx, `SELECT vital, host, epoch, weight_sum, events, samples, lost_ringbuf + lost_state + lost_recursion, threshold
		FROM vitals WHERE `+spanCond(spans, &args)+` AND `+inList("vital", vitals, &args)+`
		ORDER BY vital, host, epoch`, args...)
	if err != nil {
		return err
	}
	for _, row := range res.Rows {
		h := asString(row[1])
		ep, ok := epochs[h][asInt(row[2])]
		if !ok {
			continue
		}
		series[[2]string{asString(row[0]), h}].add(ep.start, asFloat(row[3]), asFloat(row[4]), asFloat(row[5]),
			asFloat(row[6]), float64(ep.end-ep.start)/1e9, asFloat(row[7]))
	}
	return nil
}

// sampleFilter is the drill-down's choice of samples: a range of epochs
// of one host or all, optionally one vital, and the process filters.
type sampleFilter struct {
	host     string
	from, to int64
	vital    string
	pid, uid int64
	hasPid   bool
	hasUid   bool
	comm     string
	exe      string
	fn       string
}

var filterParams = []string{"from", "to", "vital", "pid", "uid", "comm", "exe", "func", "host"}

func readFilter(p *params, vitalRequired bool) sampleFilter {
	var f sampleFilter
	f.from, f.to = p.timeRange("from", "to")
	f.vital = p.vital("vital", vitalRequired)
	f.pid, f.hasPid = p.int("pid", 0, math.MaxUint32)
	f.uid, f.hasUid = p.int("uid", 0, math.MaxUint32)
	f.comm = p.str("comm")
	f.exe = p.str("exe")
	f.fn = p.str("func")
	f.host = p.str("host")
	return f
}

// selection is a filter made SQL: the WHERE clause over samples, its
// arguments, and how many hosts it spans.
type selection struct {
	where string
	args  []any
	hosts int
}

// where returns the selection of f, or ok=false when the range holds no
// epoch of the hosts asked for.
func (a *api) where(ctx context.Context, f *sampleFilter) (sel selection, ok bool, err error) {
	hosts, err := a.hosts(ctx, f.host)
	if err != nil || len(hosts) == 0 {
		return sel, false, err
	}
	spans, err := a.epochSpans(ctx, hosts, f.from, f.to)
	if err != nil || len(spans) == 0 {
		return sel, false, err
	}
	sel.hosts = len(spans)
	conds := []string{spanCond(spans, &sel.args)}
	add := func(cond string, v any) {
		sel.args = append(sel.args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(sel.args))))
	}
	if f.vital != "" {
		add("vital = ?", f.vital)
	}
	if f.hasPid {
		add("pid = ?", f.pid)
	}
	if f.hasUid {
		add("uid = ?", f.uid)
	}
	if f.comm != "" {
		add(a.d.contains("comm", "?"), f.comm)
	}
	if f.exe != "" {
		add(a.d.contains("exe", "?"), f.exe)
	}
	if f.fn != "" {
		has := a.d.anyFrameContains("frames", "?")
		add(`(kstack_id IN (SELECT stack_id FROM stacks WHERE `+has+`)
			OR ustack_id IN (SELECT stack_id FROM stacks WHERE `+has+`))`, f.fn)
	}
	sel.where = strings.Join(conds, " AND ")
	return sel, true, nil
}

// Sample is one sampled event as the drill-down shows it. Ids are
// strings: they are 64-bit hashes, beyond what a JSON number keeps exact.
type Sample struct {
	Host      string         `json:"host"`
	Epoch     int64          `json:"epoch"`
	TsNs      int64          `json:"ts_ns"`
	Vital     string         `json:"vital"`
	LabelHash string         `json:"label_hash"`
	Weight    float64        `json:"weight"`
	EstCount  float64        `json:"est_count"`
	Pid       int64          `json:"pid"`
	Tid       int64          `json:"tid"`
	Uid       int64          `json:"uid"`
	Comm      string         `json:"comm"`
	Exe       string         `json:"exe"`
	KStackID  *string        `json:"kstack_id"`
	UStackID  *string        `json:"ustack_id"`
	Fields    map[string]any `json:"fields"`
}

// SamplesAnswer is one page of a range's samples.
type SamplesAnswer struct {
	Total   int64     `json:"total"`
	Offset  int64     `json:"offset"`
	Samples []*Sample `json:"samples"`
}

func (a *api) samples(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), slices.Concat(filterParams, []string{"limit", "offset", "order"})...)
	f := readFilter(p, false)
	limit, ok := p.int("limit", 1, maxSampleLimit)
	if !ok {
		limit = defaultSampleLimit
	}
	offset, _ := p.int("offset", 0, math.MaxInt32)
	order := p.oneOf("order", "time", "time", "weight")
	if p.err != nil {
		return nil, p.err
	}
	ans := &SamplesAnswer{Offset: offset, Samples: []*Sample{}}
	sel, ok, err := a.where(r.Context(), &f)
	if err != nil || !ok {
		return ans, err
	}
	orderBy := "ts_ns, tid, host"
	if order == "weight" {
		orderBy = "weight DESC, ts_ns, tid, host"
	}
	cols := []string{"host", "epoch", "ts_ns", "vital", "label_hash", "weight", "est_count",
		"pid", "tid", "uid", "comm", "exe", "kstack_id", "ustack_id"}
	fixed := len(cols)
	for _, c := range store.SampleFields {
		cols = append(cols, c.Name)
	}
	res, err := a.query(r.Context(), `SELECT `+strings.Join(cols, ", ")+` FROM samples
		WHERE `+sel.where+` ORDER BY `+orderBy+fmt.Sprintf(` LIMIT %d OFFSET %d`, limit, offset), sel.args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		s := &Sample{Host: asString(row[0]), Epoch: asInt(row[1]), TsNs: asInt(row[2]), Vital: asString(row[3]), LabelHash: asString(row[4]),
			Weight: asFloat(row[5]), EstCount: asFloat(row[6]), Pid: asInt(row[7]), Tid: asInt(row[8]), Uid: asInt(row[9]),
			Comm: asString(row[10]), Exe: asString(row[11]), KStackID: optString(row[12]), UStackID: optString(row[13]),
			Fields: map[string]any{}}
		for i, c := range store.SampleFields {
			if v := row[fixed+i]; v != nil {
				s.Fields[c.Name] = fieldValue(c, v)
			}
		}
		// People read a system call by its name.
		if nr, ok := s.Fields["syscall_nr"]; ok {
			s.Fields["syscall"] = sysname.Syscall(asInt(nr))
		}
		ans.Samples = append(ans.Samples, s)
	}
	cnt, err := a.query(r.Context(), `SELECT count(*) FROM samples WHERE `+sel.where, sel.args...)
	if err != nil {
		return nil, err
	}
	ans.Total = asInt(cnt.Rows[0][0])
	return ans, nil
}

// fieldValue is a sample field as JSON: a boolean column is a boolean
// whichever store it comes from (ClickHouse keeps it as 0/1).
func fieldValue(c store.Column, v any) any {
	if c.Type == "BOOLEAN" {
		if _, ok := v.(bool); !ok {
			return asInt(v) != 0
		}
	}
	return jsonSafe(v)
}

// Stack is a symbolized stack, leaf first.
type Stack struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"`
	Frames  []string `json:"frames"`
	Modules []string `json:"modules"`
}

// stackChunk bounds the ids one stacks statement asks for.
const stackChunk = 1000

// readStacks returns the stacks of ids (decimal strings of unsigned
// integers, checked or read from the store), by id.
func (a *api) readStacks(ctx context.Context, ids []string) (map[string]*Stack, error) {
	out := map[string]*Stack{}
	for len(ids) > 0 {
		chunk := ids[:min(len(ids), stackChunk)]
		ids = ids[len(chunk):]
		// The ids are integers: inline is safe.
		res, err := a.query(ctx, `SELECT stack_id, kind, frames, modules FROM stacks
			WHERE stack_id IN (`+strings.Join(chunk, ",")+`)`)
		if err != nil {
			return nil, err
		}
		for _, row := range res.Rows {
			st := &Stack{ID: asString(row[0]), Kind: asString(row[1]), Frames: asStrings(row[2]), Modules: asStrings(row[3])}
			out[st.ID] = st
		}
	}
	return out, nil
}

func (a *api) stacks(r *http.Request) (any, error) {
	q := r.URL.Query()
	p := newParams(q, "id")
	ids := q["id"]
	if len(ids) == 0 {
		p.fail("id is required: one or more stack ids (id=1&id=2)")
	}
	if len(ids) > 100 {
		p.fail("id: %d given, 100 at most", len(ids))
	}
	var in []string
	for _, id := range ids {
		n, err := strconv.ParseUint(id, 10, 64)
		if err != nil {
			p.fail("id: %q is not a stack id (an unsigned 64-bit integer)", id)
		}
		in = append(in, strconv.FormatUint(n, 10))
	}
	if p.err != nil {
		return nil, p.err
	}
	byID, err := a.readStacks(r.Context(), in)
	if err != nil {
		return nil, err
	}
	out := struct {
		Stacks []Stack `json:"stacks"`
	}{Stacks: []Stack{}}
	seen := map[string]bool{}
	for _, id := range in {
		if st := byID[id]; st != nil && !seen[id] {
			seen[id] = true
			out.Stacks = append(out.Stacks, *st)
		}
	}
	return out, nil
}

// stackIDs are the distinct stack ids in columns cols of rows.
func stackIDs(rows [][]any, cols ...int) []string {
	seen := map[string]bool{}
	var out []string
	for _, row := range rows {
		for _, c := range cols {
			if row[c] == nil {
				continue
			}
			if id := asString(row[c]); !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
		}
	}
	return out
}

// framesOf is the frames of the stack whose id is in v, or nil.
func framesOf(stacks map[string]*Stack, v any) []string {
	if st := stackOf(stacks, v); st != nil {
		return st.Frames
	}
	return nil
}

// stackOf is the stack whose id is in v, or nil.
func stackOf(stacks map[string]*Stack, v any) *Stack {
	if v == nil {
		return nil
	}
	return stacks[asString(v)]
}

// FlameStack is one folded stack, root first: the host when the range
// spans several, the process name, the user frames, then the kernel
// frames marked with a " [k]" suffix.
type FlameStack struct {
	Frames []string `json:"frames"`
	// Modules parallels Frames: each frame's executable or library, ""
	// for the host and process names and frames of no known module.
	Modules    []string `json:"modules"`
	Weight     float64  `json:"weight"`
	BaseWeight float64  `json:"base_weight"`
}

// FlameAnswer is the folded stacks of a range, and of a baseline range
// when one is given (a differential flame graph).
type FlameAnswer struct {
	Vital     string        `json:"vital"`
	Unit      string        `json:"unit"`
	Total     float64       `json:"total"`
	BaseTotal float64       `json:"base_total"`
	Truncated bool          `json:"truncated"`
	Stacks    []*FlameStack `json:"stacks"`
}

func (a *api) flame(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), slices.Concat(filterParams, []string{"base_from", "base_to", "format"})...)
	f := readFilter(p, true)
	var base *sampleFilter
	if p.q.Has("base_from") || p.q.Has("base_to") {
		b := f
		b.from, b.to = p.timeRange("base_from", "base_to")
		base = &b
	}
	if p.err != nil {
		return nil, p.err
	}
	ctx := r.Context()
	ans := &FlameAnswer{Vital: f.vital, Unit: vitalUnit(f.vital), Stacks: []*FlameStack{}}
	byPath := map[string]*FlameStack{}
	fold := func(f *sampleFilter, isBase bool) error {
		sel, ok, err := a.where(ctx, f)
		if err != nil || !ok {
			return err
		}
		res, err := a.query(ctx, `SELECT host, comm, ustack_id, kstack_id, sum(weight) AS w FROM samples
			WHERE `+sel.where+`
			GROUP BY host, comm, ustack_id, kstack_id
			ORDER BY w DESC, host, comm, ustack_id, kstack_id LIMIT `+strconv.Itoa(maxFlameStacks+1), sel.args...)
		if err != nil {
			return err
		}
		if len(res.Rows) > maxFlameStacks {
			ans.Truncated = true
			res.Rows = res.Rows[:maxFlameStacks]
		}
		stacks, err := a.readStacks(ctx, stackIDs(res.Rows, 2, 3))
		if err != nil {
			return err
		}
		for _, row := range res.Rows {
			var path, modules []string
			if sel.hosts > 1 {
				path, modules = append(path, asString(row[0])), append(modules, "")
			}
			path, modules = append(path, asString(row[1])), append(modules, "")
			for _, part := range []struct {
				st     *Stack
				suffix string
			}{{stackOf(stacks, row[2]), ""}, {stackOf(stacks, row[3]), " [k]"}} {
				if part.st == nil {
					continue
				}
				for i := len(part.st.Frames) - 1; i >= 0; i-- {
					path = append(path, part.st.Frames[i]+part.suffix)
					m := ""
					if i < len(part.st.Modules) {
						m = part.st.Modules[i]
					}
					modules = append(modules, m)
				}
			}
			key := strings.Join(path, "\x00")
			st := byPath[key]
			if st == nil {
				st = &FlameStack{Frames: path, Modules: modules}
				byPath[key] = st
				ans.Stacks = append(ans.Stacks, st)
			}
			w := asFloat(row[4])
			if isBase {
				st.BaseWeight += w
				ans.BaseTotal += w
			} else {
				st.Weight += w
				ans.Total += w
			}
		}
		return nil
	}
	if err := fold(&f, false); err != nil {
		return nil, err
	}
	if base != nil {
		if err := fold(base, true); err != nil {
			return nil, err
		}
	}
	// Heaviest first; equal weights in path order, whichever store.
	slices.SortStableFunc(ans.Stacks, func(x, y *FlameStack) int {
		if c := cmp.Compare(y.Weight, x.Weight); c != 0 {
			return c
		}
		if c := cmp.Compare(y.BaseWeight, x.BaseWeight); c != 0 {
			return c
		}
		return slices.Compare(x.Frames, y.Frames)
	})
	return ans, nil
}

// topColumns are the sample columns the top tables group by directly;
// site (the leaf frame, user first: where the program was; kernel when
// there is no user stack) and ksite (the kernel leaf) group by stacks.
var topColumns = map[string]string{"comm": "comm", "exe": "exe", "pid": "pid", "uid": "uid"}

// TopRow is one key's share of a range's samples on one host; Comm is the
// process with the most weight under the key.
type TopRow struct {
	Key      string  `json:"key"`
	Host     string  `json:"host"`
	Comm     string  `json:"comm"`
	Weight   float64 `json:"weight"`
	Samples  int64   `json:"samples"`
	EstCount float64 `json:"est_count"`
}

// TopAnswer ranks the keys of one vital's samples by weight, per host
// (a fleet's top tables have a row per host and key).
type TopAnswer struct {
	Vital       string    `json:"vital"`
	Unit        string    `json:"unit"`
	By          string    `json:"by"`
	TotalWeight float64   `json:"total_weight"`
	Rows        []*TopRow `json:"rows"`
}

// siteKey is the key of a group of samples by its stacks.
func siteKey(by string, user, kernel []string) string {
	leaf := func(frames []string) string {
		if len(frames) > 0 {
			return frames[0]
		}
		return ""
	}
	u, k := leaf(user), leaf(kernel)
	switch {
	case by == "ksite" && k != "":
		return k
	case by == "ksite":
		return "[no kernel stack]"
	case u != "":
		return u
	case k != "":
		return k + " [k]"
	}
	return "[no stack]"
}

func (a *api) top(r *http.Request) (any, error) {
	p := newParams(r.URL.Query(), slices.Concat(filterParams, []string{"by", "limit"})...)
	f := readFilter(p, true)
	by := p.oneOf("by", "comm", "comm", "exe", "pid", "uid", "site", "ksite")
	limit, ok := p.int("limit", 1, maxTopLimit)
	if !ok {
		limit = 10
	}
	if p.err != nil {
		return nil, p.err
	}
	ctx := r.Context()
	ans := &TopAnswer{Vital: f.vital, Unit: vitalUnit(f.vital), By: by, Rows: []*TopRow{}}
	sel, ok, err := a.where(ctx, &f)
	if err != nil || !ok {
		return ans, err
	}
	// Every group is read and ranked here; the key of a site is its
	// stacks' leaf, which only the stacks table knows. A key's comm is
	// the process with the most weight under it (the first by name of
	// equals), so that both stores name the same.
	group := topColumns[by]
	if group == "" {
		group = "ustack_id, kstack_id"
	}
	res, err := a.query(ctx, `SELECT host, `+group+`, comm, sum(weight), count(*), sum(est_count)
		FROM samples WHERE `+sel.where+` GROUP BY host, `+group+`, comm`, sel.args...)
	if err != nil {
		return nil, err
	}
	keyOf := func(row []any) string { return asString(row[1]) }
	n := 2 // the columns before comm
	if topColumns[by] == "" {
		stacks, err := a.readStacks(ctx, stackIDs(res.Rows, 1, 2))
		if err != nil {
			return nil, err
		}
		keyOf = func(row []any) string { return siteKey(by, framesOf(stacks, row[1]), framesOf(stacks, row[2])) }
		n = 3
	}
	type hostKey struct{ host, key string }
	rows := map[hostKey]*TopRow{}
	commWeight := map[hostKey]map[string]float64{}
	for _, row := range res.Rows {
		k := hostKey{asString(row[0]), keyOf(row)}
		tr := rows[k]
		if tr == nil {
			tr = &TopRow{Key: k.key, Host: k.host}
			rows[k] = tr
			commWeight[k] = map[string]float64{}
			ans.Rows = append(ans.Rows, tr)
		}
		w := asFloat(row[n+1])
		commWeight[k][asString(row[n])] += w
		tr.Weight += w
		tr.Samples += asInt(row[n+2])
		tr.EstCount += asFloat(row[n+3])
		ans.TotalWeight += w
	}
	for k, tr := range rows {
		best := -1.0
		for comm, w := range commWeight[k] {
			if w > best || (w == best && comm < tr.Comm) {
				best, tr.Comm = w, comm
			}
		}
	}
	if res.Truncated {
		tot, err := a.query(ctx, `SELECT sum(weight) FROM samples WHERE `+sel.where, sel.args...)
		if err != nil {
			return nil, err
		}
		ans.TotalWeight = asFloat(tot.Rows[0][0])
	}
	slices.SortFunc(ans.Rows, func(x, y *TopRow) int {
		if x.Weight != y.Weight {
			return cmp.Compare(y.Weight, x.Weight)
		}
		if x.Key != y.Key {
			return strings.Compare(x.Key, y.Key)
		}
		return strings.Compare(x.Host, y.Host)
	})
	ans.Rows = ans.Rows[:min(len(ans.Rows), int(limit))]
	return ans, nil
}

// Conversions from what the DuckDB driver scans into JSON-friendly values.

func asInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case int16:
		return int64(x)
	case int8:
		return int64(x)
	case uint64:
		return int64(x)
	case uint32:
		return int64(x)
	case uint16:
		return int64(x)
	case uint8:
		return int64(x)
	case float64:
		return int64(x)
	case *big.Int:
		return x.Int64()
	}
	return 0
}

func asFloat(v any) float64 {
	switch x := v.(type) {
	case float64:
		return x
	case float32:
		return float64(x)
	case *big.Int:
		f, _ := new(big.Float).SetInt(x).Float64()
		return f
	}
	return float64(asInt(v))
}

func asString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case nil:
		return ""
	}
	return fmt.Sprint(v)
}

func optString(v any) *string {
	if v == nil {
		return nil
	}
	s := asString(v)
	return &s
}

func asStrings(v any) []string {
	list, _ := v.([]any)
	out := make([]string, 0, len(list))
	for _, x := range list {
		out = append(out, asString(x))
	}
	return out
}

// jsonSafe keeps integers a browser reads exactly as numbers and gives the
// rest (addresses, 64-bit flags) as decimal strings.
func jsonSafe(v any) any {
	switch x := v.(type) {
	case uint64:
		if x > 1<<53 {
			return strconv.FormatUint(x, 10)
		}
	case int64:
		if x > 1<<53 || x < -(1<<53) {
			return strconv.FormatInt(x, 10)
		}
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	}
	return v
}
