package server

import (
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

	"github.com/holter-dev/holter/internal/store"
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
}

// query runs SQL with args. The SQL is ours and the parameters were
// checked before, so a failure here is the server's (500), not the user's.
func (a *api) query(ctx context.Context, sql string, args ...any) (*store.Result, error) {
	return a.store.Query(ctx, sql, args...)
}

// handle wraps an endpoint: it returns the answer or an error, which
// is a 500 unless it is an httpError with its own code (params' are 400s).
func handle(f func(r *http.Request) (any, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		out, err := f(r)
		if err != nil {
			code := http.StatusInternalServerError
			var he httpError
			if errors.As(err, &he) {
				code = he.code
			}
			writeError(w, code, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, out)
	}
}

type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }

// host returns the host a request is about: the one named, which must be
// recorded, or else the one that recorded last.
func (a *api) host(ctx context.Context, name string) (string, error) {
	if name != "" {
		res, err := a.query(ctx, `SELECT 1 FROM epochs WHERE host = $1 LIMIT 1`, name)
		if err != nil {
			return "", err
		}
		if len(res.Rows) == 0 {
			return "", httpError{http.StatusNotFound, fmt.Sprintf("host: nothing recorded for host %q", name)}
		}
		return name, nil
	}
	res, err := a.query(ctx, `SELECT host FROM epochs ORDER BY end_ns DESC LIMIT 1`)
	if err != nil || len(res.Rows) == 0 {
		return "", err
	}
	return asString(res.Rows[0][0]), nil
}

// epochSpan returns the epochs of host whose middle falls in [from, to):
// clicking an epoch or brushing a range must not pick up its neighbours,
// and the UI's times are doubles, a few hundred nanoseconds off.
func (a *api) epochSpan(ctx context.Context, host string, from, to int64) (lo, hi int64, ok bool, err error) {
	res, err := a.query(ctx, `SELECT min(epoch), max(epoch) FROM epochs
		WHERE host = $1 AND (start_ns + end_ns) / 2 >= $2 AND (start_ns + end_ns) / 2 < $3`, host, from, to)
	if err != nil || len(res.Rows) == 0 || res.Rows[0][0] == nil {
		return 0, 0, false, err
	}
	return asInt(res.Rows[0][0]), asInt(res.Rows[0][1]), true, nil
}

// typicalEpoch is the median epoch length of host, in nanoseconds.
func (a *api) typicalEpoch(ctx context.Context, host string) (int64, error) {
	res, err := a.query(ctx, `SELECT median(end_ns - start_ns)::BIGINT FROM epochs WHERE host = $1`, host)
	if err != nil || len(res.Rows) == 0 || res.Rows[0][0] == nil {
		return 0, err
	}
	return asInt(res.Rows[0][0]), nil
}

// Overview is what the UI needs first: what is recorded, and where.
type Overview struct {
	Hosts      []string       `json:"hosts"`
	Host       string         `json:"host"`
	FirstNs    int64          `json:"first_ns"`
	LastNs     int64          `json:"last_ns"`
	Epochs     int64          `json:"epochs"`
	LastEpoch  int64          `json:"last_epoch"`
	EpochNs    int64          `json:"epoch_ns"`
	Live       bool           `json:"live"`
	Vitals     []VitalInfo    `json:"vitals"`
	Timescales []TimescaleDef `json:"timescales"`
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
		host, err := a.host(ctx, hostName)
		if err != nil {
			return nil, err
		}
		ov := Overview{Hosts: []string{}, Host: host, Live: live}
		hosts, err := a.query(ctx, `SELECT DISTINCT host FROM epochs ORDER BY host`)
		if err != nil {
			return nil, err
		}
		for _, row := range hosts.Rows {
			ov.Hosts = append(ov.Hosts, asString(row[0]))
		}
		recorded := map[string]bool{}
		if host != "" {
			res, err := a.query(ctx, `SELECT min(start_ns), max(end_ns), count(*), max(epoch) FROM epochs WHERE host = $1`, host)
			if err != nil {
				return nil, err
			}
			row := res.Rows[0]
			ov.FirstNs, ov.LastNs, ov.Epochs, ov.LastEpoch = asInt(row[0]), asInt(row[1]), asInt(row[2]), asInt(row[3])
			if ov.EpochNs, err = a.typicalEpoch(ctx, host); err != nil {
				return nil, err
			}
			vs, err := a.query(ctx, `SELECT DISTINCT vital FROM vitals WHERE host = $1 AND epoch = $2`, host, ov.LastEpoch)
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

// Series is one vital over time. Seconds is how much recorded time each
// point covers, so a point's rate is Weight/Seconds whatever the timescale.
type Series struct {
	Vital   string    `json:"vital"`
	Unit    string    `json:"unit"`
	T       []int64   `json:"t"`
	Weight  []float64 `json:"weight"`
	Events  []float64 `json:"events"`
	Samples []float64 `json:"samples"`
	Lost    []float64 `json:"lost"`
	Seconds []float64 `json:"seconds"`
}

// VitalsAnswer is the vitals of a range at one timescale.
type VitalsAnswer struct {
	Host      string    `json:"host"`
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
	host, err := a.host(ctx, hostName)
	if err != nil {
		return nil, err
	}
	ans := &VitalsAnswer{Host: host, From: from, To: to, Series: []*Series{}}
	epochNs, err := a.typicalEpoch(ctx, host)
	if err != nil {
		return nil, err
	}
	if timescale == "auto" {
		timescale = pickTimescale(to-from, epochNs)
	}
	ans.Timescale = timescale
	byVital := map[string]*Series{}
	for _, v := range vitals {
		s := &Series{Vital: v, Unit: vitalUnit(v), T: []int64{}, Weight: []float64{}, Events: []float64{},
			Samples: []float64{}, Lost: []float64{}, Seconds: []float64{}}
		byVital[v] = s
		ans.Series = append(ans.Series, s)
	}
	// The vital names are checked against the known list: quoting them
	// inline is safe, and keeps the IN list a constant DuckDB can prune on.
	in := "'" + strings.Join(vitals, "','") + "'"
	var res *store.Result
	if timescale == "epoch" {
		ans.BucketNs = epochNs
		res, err = a.query(ctx, `SELECT v.vital, e.start_ns, v.weight_sum::DOUBLE, v.events::DOUBLE, v.samples::DOUBLE,
				(v.lost_ringbuf + v.lost_state)::DOUBLE, (e.end_ns - e.start_ns) / 1e9
			FROM vitals v JOIN epochs e ON e.host = v.host AND e.epoch = v.epoch
			WHERE e.host = $1 AND e.end_ns > $2 AND e.start_ns < $3 AND v.vital IN (`+in+`)
			ORDER BY v.vital, e.start_ns`, host, from, to)
	} else {
		var width int64
		for _, ts := range store.Timescales {
			if ts.Name == timescale {
				width = ts.Width.Nanoseconds()
			}
		}
		ans.BucketNs = width
		res, err = a.query(ctx, `SELECT vital, bucket_ns, weight_sum::DOUBLE, events::DOUBLE, samples::DOUBLE,
				lost::DOUBLE, epochs * $5 / 1e9
			FROM rollups
			WHERE timescale = $1 AND host = $2 AND bucket_ns > $3 - $6 AND bucket_ns < $4 AND vital IN (`+in+`)
			ORDER BY vital, bucket_ns`, timescale, host, from, to, epochNs, width)
	}
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		s := byVital[asString(row[0])]
		s.T = append(s.T, asInt(row[1]))
		s.Weight = append(s.Weight, asFloat(row[2]))
		s.Events = append(s.Events, asFloat(row[3]))
		s.Samples = append(s.Samples, asFloat(row[4]))
		s.Lost = append(s.Lost, asFloat(row[5]))
		s.Seconds = append(s.Seconds, asFloat(row[6]))
	}
	return ans, nil
}

// sampleFilter is the drill-down's choice of samples: a range of epochs
// of one host, optionally one vital, and the process filters.
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

// where returns the WHERE clause over samples s and its arguments, or
// ok=false when the range holds no epoch.
func (a *api) where(ctx context.Context, f *sampleFilter) (clause string, args []any, ok bool, err error) {
	if f.host, err = a.host(ctx, f.host); err != nil {
		return "", nil, false, err
	}
	lo, hi, ok, err := a.epochSpan(ctx, f.host, f.from, f.to)
	if err != nil || !ok {
		return "", nil, false, err
	}
	args = []any{f.host, lo, hi}
	conds := []string{"s.host = $1", "s.epoch BETWEEN $2 AND $3"}
	add := func(cond string, v any) {
		args = append(args, v)
		conds = append(conds, strings.ReplaceAll(cond, "?", fmt.Sprintf("$%d", len(args))))
	}
	if f.vital != "" {
		add("s.vital = ?", f.vital)
	}
	if f.hasPid {
		add("s.pid = ?", f.pid)
	}
	if f.hasUid {
		add("s.uid = ?", f.uid)
	}
	if f.comm != "" {
		add("contains(s.comm, ?)", f.comm)
	}
	if f.exe != "" {
		add("contains(s.exe, ?)", f.exe)
	}
	if f.fn != "" {
		add(`(s.kstack_id IN (SELECT stack_id FROM stacks WHERE contains(array_to_string(frames, chr(10)), ?))
			OR s.ustack_id IN (SELECT stack_id FROM stacks WHERE contains(array_to_string(frames, chr(10)), ?)))`, f.fn)
	}
	return strings.Join(conds, " AND "), args, true, nil
}

// Sample is one sampled event as the drill-down shows it. Ids are
// strings: they are 64-bit hashes, beyond what a JSON number keeps exact.
type Sample struct {
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
	where, args, ok, err := a.where(r.Context(), &f)
	if err != nil || !ok {
		return ans, err
	}
	orderBy := "s.ts_ns, s.tid"
	if order == "weight" {
		orderBy = "s.weight DESC, s.ts_ns"
	}
	cols := []string{"epoch", "ts_ns", "vital", "label_hash::VARCHAR", "weight::DOUBLE", "est_count::DOUBLE",
		"pid", "tid", "uid", "comm", "exe", "kstack_id::VARCHAR", "ustack_id::VARCHAR"}
	fixed := len(cols)
	for _, c := range store.SampleFields {
		cols = append(cols, c.Name)
	}
	res, err := a.query(r.Context(), `SELECT `+prefixed("s.", cols)+`, count(*) OVER () FROM samples s
		WHERE `+where+` ORDER BY `+orderBy+fmt.Sprintf(` LIMIT %d OFFSET %d`, limit, offset), args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		s := &Sample{Epoch: asInt(row[0]), TsNs: asInt(row[1]), Vital: asString(row[2]), LabelHash: asString(row[3]),
			Weight: asFloat(row[4]), EstCount: asFloat(row[5]), Pid: asInt(row[6]), Tid: asInt(row[7]), Uid: asInt(row[8]),
			Comm: asString(row[9]), Exe: asString(row[10]), KStackID: optString(row[11]), UStackID: optString(row[12]),
			Fields: map[string]any{}}
		for i, c := range store.SampleFields {
			if v := row[fixed+i]; v != nil {
				s.Fields[c.Name] = jsonSafe(v)
			}
		}
		ans.Total = asInt(row[len(row)-1])
		ans.Samples = append(ans.Samples, s)
	}
	if len(res.Rows) == 0 && offset > 0 {
		// The page is past the end; say how many there are.
		cnt, err := a.query(r.Context(), `SELECT count(*) FROM samples s WHERE `+where, args...)
		if err != nil {
			return nil, err
		}
		ans.Total = asInt(cnt.Rows[0][0])
	}
	return ans, nil
}

func prefixed(prefix string, cols []string) string {
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = prefix + c
	}
	return strings.Join(out, ", ")
}

// Stack is a symbolized stack, leaf first.
type Stack struct {
	ID      string   `json:"id"`
	Kind    string   `json:"kind"`
	Frames  []string `json:"frames"`
	Modules []string `json:"modules"`
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
		if _, err := strconv.ParseUint(id, 10, 64); err != nil {
			p.fail("id: %q is not a stack id (an unsigned 64-bit integer)", id)
		}
		in = append(in, id)
	}
	if p.err != nil {
		return nil, p.err
	}
	// The ids parsed as integers: inline is safe.
	res, err := a.query(r.Context(), `SELECT stack_id::VARCHAR, kind, frames, modules FROM stacks
		WHERE stack_id IN (`+strings.Join(in, ",")+`)`)
	if err != nil {
		return nil, err
	}
	out := struct {
		Stacks []Stack `json:"stacks"`
	}{Stacks: []Stack{}}
	for _, row := range res.Rows {
		out.Stacks = append(out.Stacks, Stack{ID: asString(row[0]), Kind: asString(row[1]),
			Frames: asStrings(row[2]), Modules: asStrings(row[3])})
	}
	return out, nil
}

// FlameStack is one folded stack, root first: the process name, the user
// frames, then the kernel frames marked with a " [k]" suffix.
type FlameStack struct {
	Frames     []string `json:"frames"`
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
	p := newParams(r.URL.Query(), slices.Concat(filterParams, []string{"base_from", "base_to"})...)
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
	ans := &FlameAnswer{Vital: f.vital, Unit: vitalUnit(f.vital), Stacks: []*FlameStack{}}
	byPath := map[string]*FlameStack{}
	fold := func(f *sampleFilter, isBase bool) error {
		where, args, ok, err := a.where(r.Context(), f)
		if err != nil || !ok {
			return err
		}
		res, err := a.query(r.Context(), `SELECT s.comm, u.frames, k.frames, sum(s.weight)::DOUBLE AS w
			FROM samples s LEFT JOIN stacks u ON u.stack_id = s.ustack_id LEFT JOIN stacks k ON k.stack_id = s.kstack_id
			WHERE `+where+`
			GROUP BY s.comm, s.ustack_id, s.kstack_id, u.frames, k.frames
			ORDER BY w DESC LIMIT `+strconv.Itoa(maxFlameStacks+1), args...)
		if err != nil {
			return err
		}
		if len(res.Rows) > maxFlameStacks {
			ans.Truncated = true
			res.Rows = res.Rows[:maxFlameStacks]
		}
		for _, row := range res.Rows {
			path := []string{asString(row[0])}
			user, kernel := asStrings(row[1]), asStrings(row[2])
			for i := len(user) - 1; i >= 0; i-- {
				path = append(path, user[i])
			}
			for i := len(kernel) - 1; i >= 0; i-- {
				path = append(path, kernel[i]+" [k]")
			}
			key := strings.Join(path, "\x00")
			st := byPath[key]
			if st == nil {
				st = &FlameStack{Frames: path}
				byPath[key] = st
				ans.Stacks = append(ans.Stacks, st)
			}
			w := asFloat(row[3])
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
	return ans, nil
}

// topKeys are what the top tables group by; site is the leaf frame, user
// first (where the program was), kernel when there is no user stack.
var topKeys = map[string]string{
	"comm":  "s.comm",
	"exe":   "s.exe",
	"pid":   "s.pid::VARCHAR",
	"uid":   "s.uid::VARCHAR",
	"site":  "coalesce(u.frames[1], k.frames[1] || ' [k]', '[no stack]')",
	"ksite": "coalesce(k.frames[1], '[no kernel stack]')",
}

// TopRow is one key's share of a range's samples.
type TopRow struct {
	Key      string  `json:"key"`
	Comm     string  `json:"comm"`
	Weight   float64 `json:"weight"`
	Samples  int64   `json:"samples"`
	EstCount float64 `json:"est_count"`
}

// TopAnswer ranks the keys of one vital's samples by weight.
type TopAnswer struct {
	Vital       string    `json:"vital"`
	Unit        string    `json:"unit"`
	By          string    `json:"by"`
	TotalWeight float64   `json:"total_weight"`
	Rows        []*TopRow `json:"rows"`
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
	ans := &TopAnswer{Vital: f.vital, Unit: vitalUnit(f.vital), By: by, Rows: []*TopRow{}}
	where, args, ok, err := a.where(r.Context(), &f)
	if err != nil || !ok {
		return ans, err
	}
	res, err := a.query(r.Context(), `SELECT `+topKeys[by]+` AS key, arg_max(s.comm, s.weight), sum(s.weight)::DOUBLE AS w,
			count(*), sum(s.est_count)::DOUBLE, sum(sum(s.weight)) OVER ()::DOUBLE
		FROM samples s LEFT JOIN stacks u ON u.stack_id = s.ustack_id LEFT JOIN stacks k ON k.stack_id = s.kstack_id
		WHERE `+where+` GROUP BY key ORDER BY w DESC, key LIMIT `+strconv.FormatInt(limit, 10), args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		ans.Rows = append(ans.Rows, &TopRow{Key: asString(row[0]), Comm: asString(row[1]), Weight: asFloat(row[2]),
			Samples: asInt(row[3]), EstCount: asFloat(row[4])})
		ans.TotalWeight = asFloat(row[5])
	}
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
