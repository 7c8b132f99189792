package export

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
)

// Source is the local store the exporter reads committed epochs from;
// *store.Store is one.
type Source interface {
	Query(ctx context.Context, sql string, args ...any) (*store.Result, error)
}

// Options configures an Exporter.
type Options struct {
	Client *clickhouse.Client
	Store  Source
	Host   string
	// SpoolDir holds the batches ClickHouse has not acknowledged.
	SpoolDir string
	// SpoolLimit bounds the spool's bytes; beyond it the oldest batches
	// are dropped and counted. 0 means DefaultSpoolLimit.
	SpoolLimit int64
	// Rate bounds the bytes shipped per second; 0 means DefaultRate.
	Rate int64
	// Tables to ship; nil means DefaultTables().
	Tables []Table
	Logf   func(format string, args ...any)
}

const (
	DefaultSpoolLimit = 256 << 20
	DefaultRate       = 2 << 20
)

// Exporter ships committed epochs to ClickHouse.
type Exporter struct {
	opts   Options
	spool  *spool
	tables []Table
	cols   map[string][]column
	once   map[string]map[string]bool
	first  int64 // the first epoch Committed was told of; -1: none yet

	mu     sync.Mutex
	status Status
}

// Status is what holter status says about shipping.
type Status struct {
	URL              string `json:"url"`
	Database         string `json:"database"`
	Server           string `json:"server_version,omitempty"`
	Connected        bool   `json:"connected"`
	SpooledBatches   int    `json:"spooled_batches"`
	SpooledBytes     int64  `json:"spooled_bytes"`
	SpoolLimit       int64  `json:"spool_limit_bytes"`
	ShippedBatches   uint64 `json:"shipped_batches"`
	ShippedRows      uint64 `json:"shipped_rows"`
	ShippedBytes     uint64 `json:"shipped_bytes"`
	AlreadyThere     uint64 `json:"batches_found_already_shipped"`
	DroppedBatches   uint64 `json:"dropped_batches"`
	DroppedRows      uint64 `json:"dropped_rows"`
	LastSpooledEpoch int64  `json:"last_spooled_epoch"`
	// LastShippedEpoch is the last epoch every batch of which the server
	// acknowledged (since this process started; -1: none).
	LastShippedEpoch int64 `json:"last_shipped_epoch"`
	// Span commits (store.SpanCommitSeq) spooled and shipped, wholly.
	LastSpooledSpanSeq int64     `json:"last_spooled_span_seq"`
	LastShippedSpanSeq int64     `json:"last_shipped_span_seq"`
	LastError          string    `json:"last_error,omitempty"`
	LastErrorAt        time.Time `json:"last_error_at,omitzero"`
}

// New opens the spool; Run ships.
func New(opts Options) (*Exporter, error) {
	if opts.Client == nil || opts.Store == nil || opts.Host == "" || opts.SpoolDir == "" {
		return nil, errors.New("export: client, store, host and spool directory are required")
	}
	if opts.SpoolLimit == 0 {
		opts.SpoolLimit = DefaultSpoolLimit
	}
	if opts.Rate == 0 {
		opts.Rate = DefaultRate
	}
	if opts.Tables == nil {
		opts.Tables = DefaultTables()
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	sp, err := openSpool(opts.SpoolDir, opts.SpoolLimit)
	if err != nil {
		return nil, err
	}
	e := &Exporter{opts: opts, spool: sp, tables: opts.Tables, cols: map[string][]column{}, once: map[string]map[string]bool{}, first: -1}
	e.status = Status{URL: opts.Client.URL(), Database: opts.Client.Database(), SpoolLimit: opts.SpoolLimit, LastShippedEpoch: -1}
	ctx := context.Background()
	for i := range e.tables {
		t := &e.tables[i]
		cols, err := storeColumns(ctx, opts.Store, t.Name)
		if err != nil {
			return nil, fmt.Errorf("export: %w", err)
		}
		if t.AddHost {
			cols = append(cols, column{name: "host", chType: "String"})
		}
		e.cols[t.Name] = cols
		for _, k := range t.Key {
			if !hasColumn(cols, k) {
				return nil, fmt.Errorf("export: table %s has no key column %s", t.Name, k)
			}
		}
	}
	return e, nil
}

func hasColumn(cols []column, name string) bool {
	for _, c := range cols {
		if c.name == name {
			return true
		}
	}
	return false
}

// Committed spools every epoch of the host committed up to epoch that is
// not spooled yet — after a restart, the ones committed while the exporter
// was not running — and then the span commits not spooled yet. It runs on
// the recorder's committer, after the commit: reading and writing small
// files, never waiting for the network.
func (e *Exporter) Committed(ctx context.Context, epoch int64) error {
	last := e.spool.lastEpoch()
	if last < 0 {
		// A new spool starts with the first epoch it is told of, also
		// when spooling that one failed.
		if e.first < 0 {
			e.first = epoch
		}
		last = e.first - 1
	}
	res, err := e.opts.Store.Query(ctx, `SELECT epoch, start_ns, end_ns FROM epochs WHERE host = $1 AND epoch > $2 AND epoch <= $3 ORDER BY epoch`,
		e.opts.Host, last, epoch)
	if err != nil {
		return fmt.Errorf("export: %w", err)
	}
	for _, r := range res.Rows {
		n, start, end := toInt(r[0]), toInt(r[1]), toInt(r[2])
		prefix, args := fmt.Sprintf("%s/%d", e.opts.Host, n), []any{e.opts.Host, n, start, end}
		batches, shipped, err := e.batches(ctx, byEpoch, prefix, n, args...)
		if err != nil {
			return err
		}
		if len(e.once) > 0 && e.spool.wouldDrop(batches) {
			// The batches to be dropped may hold the only copy of stacks
			// this epoch's samples refer to: send them all again.
			e.once = map[string]map[string]bool{}
			if batches, shipped, err = e.batches(ctx, byEpoch, prefix, n, args...); err != nil {
				return err
			}
		}
		dropped, err := e.spool.add(batches, func(st *spoolState) { st.LastEpoch = n })
		if err != nil {
			return err
		}
		if dropped { // maybe this epoch's own batches: later epochs send all theirs
			e.once = map[string]map[string]bool{}
		} else {
			e.markOnce(shipped)
		}
	}
	return e.spans(ctx)
}

// spans spools the rows of span commits after the last one spooled, up to
// the last one committed. Commits take sequence numbers under the store's
// writer lock, so every commit up to the store's last number is visible;
// a new spool starts with the first commit the store has.
func (e *Exporter) spans(ctx context.Context) error {
	hasSeq := false
	for i := range e.tables {
		hasSeq = hasSeq || e.tables[i].Seq
	}
	if !hasSeq {
		return nil
	}
	res, err := e.opts.Store.Query(ctx, store.SpanCommitSeq)
	if err != nil {
		return fmt.Errorf("export spans: %w", err)
	}
	lo, hi := e.spool.lastSpanSeq(), int64(0)
	if len(res.Rows) == 1 {
		hi = toInt(res.Rows[0][0])
	}
	if hi <= lo {
		return nil
	}
	batches, _, err := e.batches(ctx, func(t *Table) bool { return t.Seq }, fmt.Sprintf("%s/spans-%d-%d", e.opts.Host, lo, hi), hi, e.opts.Host, lo, hi)
	if err != nil {
		return err
	}
	if _, err = e.spool.add(batches, func(st *spoolState) { st.LastSpanSeq = hi }); err != nil {
		return err
	}
	if len(batches) == 0 {
		// Commits whose rows are gone (pruned) ship nothing: they are
		// shipped once every span batch before them is.
		if !e.spool.spansPending() {
			e.mu.Lock()
			e.status.LastShippedSpanSeq = max(e.status.LastShippedSpanSeq, hi)
			e.mu.Unlock()
		}
	}
	return nil
}

// byEpoch picks the tables shipped by epoch.
func byEpoch(t *Table) bool { return !t.Seq }

// onceKey is a row of a Once table, by its key.
type onceKey struct{ table, key string }

// markOnce records rows of Once tables as spooled, once they are: a
// failed spool write must not keep them from the next try.
func (e *Exporter) markOnce(keys []onceKey) {
	for _, k := range keys {
		if e.once[k.table] == nil {
			e.once[k.table] = map[string]bool{}
		}
		e.once[k.table][k.key] = true
	}
}

// batches reads the rows of the tables pick picks, as batches with ids
// prefix/table/i and _version version; args are the tables' Rows
// parameters. Rows of Once tables already spooled are left out; the ones
// put in are returned, for markOnce once the batches are spooled.
func (e *Exporter) batches(ctx context.Context, pick func(*Table) bool, prefix string, version int64, args ...any) ([]*batch, []onceKey, error) {
	var out []*batch
	var shipped []onceKey
	// Every parameter is named once up front: DuckDB wants each one given
	// to appear in the statement.
	var params []string
	for i := range args {
		params = append(params, fmt.Sprintf("$%d AS _p%d", i+1, i+1))
	}
	with := `WITH _params AS (SELECT ` + strings.Join(params, ", ") + `) `
	for i := range e.tables {
		t := &e.tables[i]
		if !pick(t) {
			continue
		}
		res, err := e.opts.Store.Query(ctx, with+t.Rows, args...)
		if err != nil {
			return nil, nil, fmt.Errorf("export %s (%s): %w", t.Name, prefix, err)
		}
		if t.AddHost {
			res.Columns = append(res.Columns, "host")
			for j := range res.Rows {
				res.Rows[j] = append(res.Rows[j], e.opts.Host)
			}
		}
		keyIdx := keyIndexes(res.Columns, t.Key)
		chunk := t.Chunk
		if chunk <= 0 {
			chunk = DefaultChunk
		}
		var buf bytes.Buffer
		rows, chunks := 0, 0
		flush := func() {
			if rows == 0 {
				return
			}
			// Numbered within the table: a batch spooled again after a
			// crash has the id it had, whatever the Once tables before it
			// held the second time (all their rows, to a new exporter).
			id := fmt.Sprintf("%s/%s/%d", prefix, t.Name, chunks)
			chunks++
			// The batch id is in every row, so whether a batch arrived can
			// be asked of the server.
			data := bytes.ReplaceAll(buf.Bytes(), []byte(`"_batch":""`), []byte(`"_batch":`+jsonString(id)))
			out = append(out, &batch{batchHeader: batchHeader{ID: id, Table: t.Name, Epoch: version, Spans: t.Seq, Rows: rows}, data: data})
			buf = bytes.Buffer{}
			rows = 0
		}
		for _, r := range res.Rows {
			if t.Once {
				k := keyOf(r, keyIdx)
				if e.once[t.Name][k] {
					continue
				}
				shipped = append(shipped, onceKey{t.Name, k})
			}
			if err := encodeRow(&buf, res.Columns, r, e.cols[t.Name], version); err != nil {
				return nil, nil, fmt.Errorf("export %s (%s): %w", t.Name, prefix, err)
			}
			if rows++; rows == chunk {
				flush()
			}
		}
		flush()
	}
	return out, shipped, nil
}

func keyIndexes(cols, key []string) []int {
	var idx []int
	for _, k := range key {
		for i, c := range cols {
			if c == k {
				idx = append(idx, i)
			}
		}
	}
	return idx
}

func keyOf(r []any, idx []int) string {
	var parts []string
	for _, i := range idx {
		parts = append(parts, fmt.Sprint(r[i]))
	}
	return strings.Join(parts, "\x00")
}

// encodeRow writes one JSONEachRow line, with _batch left empty for the
// caller to fill and _version the epoch. It writes the JSON itself, in
// column order: this runs on the recorder's committer for every row
// shipped, and encoding/json's map encoding (reflection, sorted keys)
// cost it twice the CPU of the rows' commit.
func encodeRow(buf *bytes.Buffer, names []string, r []any, cols []column, epoch int64) error {
	buf.WriteByte('{')
	for i, v := range r {
		if i > 0 {
			buf.WriteByte(',')
		}
		writeJSONString(buf, names[i])
		buf.WriteByte(':')
		if err := writeJSON(buf, jsonValue(v, cols, names[i])); err != nil {
			return fmt.Errorf("column %s: %w", names[i], err)
		}
	}
	if len(r) > 0 {
		buf.WriteByte(',')
	}
	buf.WriteString(`"_batch":"","_version":`)
	buf.Write(strconv.AppendInt(buf.AvailableBuffer(), epoch, 10))
	buf.WriteString("}\n")
	return nil
}

// writeJSON writes the common cell types directly, others through
// encoding/json.
func writeJSON(buf *bytes.Buffer, v any) error {
	switch x := v.(type) {
	case nil:
		buf.WriteString("null")
	case string:
		writeJSONString(buf, x)
	case int64:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), x, 10))
	case int32:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(x), 10))
	case int:
		buf.Write(strconv.AppendInt(buf.AvailableBuffer(), int64(x), 10))
	case uint64:
		buf.Write(strconv.AppendUint(buf.AvailableBuffer(), x, 10))
	case uint32:
		buf.Write(strconv.AppendUint(buf.AvailableBuffer(), uint64(x), 10))
	case float64:
		buf.Write(strconv.AppendFloat(buf.AvailableBuffer(), x, 'g', -1, 64))
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return err
		}
		buf.Write(b)
	}
	return nil
}

// writeJSONString writes s as a JSON string: quotes, backslashes and
// control characters escaped, everything else as it is.
func writeJSONString(buf *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	buf.WriteByte('"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		buf.WriteString(s[start:i])
		switch c {
		case '"', '\\':
			buf.WriteByte('\\')
			buf.WriteByte(c)
		case '\n':
			buf.WriteString(`\n`)
		case '\t':
			buf.WriteString(`\t`)
		case '\r':
			buf.WriteString(`\r`)
		default:
			buf.WriteString(`\u00`)
			buf.WriteByte(hex[c>>4])
			buf.WriteByte(hex[c&0xf])
		}
		start = i + 1
	}
	buf.WriteString(s[start:])
	buf.WriteByte('"')
}

func jsonValue(v any, cols []column, name string) any {
	switch x := v.(type) {
	case bool:
		if x {
			return 1
		}
		return 0
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return nil
		}
	case float32:
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return nil
		}
	case []any:
		out := make([]any, len(x))
		for i := range x {
			out[i] = jsonValue(x[i], cols, name)
		}
		return out
	case []byte:
		return string(x)
	case time.Time:
		return x.UTC().Format(time.RFC3339Nano)
	case nil, string, int64, int32, int16, int8, uint64, uint32, uint16, uint8, int, uint:
		return v
	}
	for _, c := range cols {
		if c.name == name && c.chType == "String" {
			return fmt.Sprint(v)
		}
	}
	return v
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func toInt(v any) int64 {
	switch x := v.(type) {
	case int64:
		return x
	case int32:
		return int64(x)
	case uint64:
		return int64(x)
	case uint32:
		return int64(x)
	}
	return 0
}

// Run ships the spool until ctx ends: it creates or migrates the schema
// once the server answers, then sends the oldest batch, one at a time,
// no faster than the rate allows, backing off while the server is away.
func (e *Exporter) Run(ctx context.Context) error {
	backoff := time.Duration(0)
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return true
		}
	}
	fail := func(err error) {
		e.mu.Lock()
		e.status.Connected = false
		repeated := e.status.LastError == err.Error()
		e.status.LastError, e.status.LastErrorAt = err.Error(), time.Now().UTC()
		e.mu.Unlock()
		if !repeated {
			e.opts.Logf("export: %v (retrying; batches wait in the spool)", err)
		}
		backoff = min(max(2*backoff, 250*time.Millisecond), 10*time.Second)
	}
	schemaReady := false
	for ctx.Err() == nil {
		if backoff > 0 && !wait(backoff) {
			break
		}
		if !schemaReady {
			if err := e.ensureSchema(ctx); err != nil {
				fail(err)
				continue
			}
			schemaReady = true
		}
		b, f, err := e.spool.head()
		if err != nil {
			fail(err)
			continue
		}
		if b == nil {
			backoff = 0
			select {
			case <-ctx.Done():
			case <-e.spool.changed:
			case <-time.After(time.Second):
			}
			continue
		}
		began := time.Now()
		there, err := e.send(ctx, b, f)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			e.spool.markMaybe(f)
			var se *clickhouse.ServerError
			if errors.As(err, &se) {
				schemaReady = false // the server may have lost or not yet have the tables
			}
			fail(fmt.Errorf("ship %s: %w", b.ID, err))
			continue
		}
		whole, err := e.spool.ack(f)
		if err != nil {
			fail(err)
			continue
		}
		backoff = 0
		e.mu.Lock()
		e.status.Connected = true
		if there {
			e.status.AlreadyThere++
		} else {
			e.status.ShippedBatches++
			e.status.ShippedRows += uint64(b.Rows)
			e.status.ShippedBytes += uint64(len(b.data))
		}
		// An epoch (a span commit range) is shipped when all its batches
		// are: a reader of epochs up to LastShippedEpoch finds every
		// sample, stack and vital of them.
		switch {
		case !whole:
		case b.Spans:
			e.status.LastShippedSpanSeq = max(e.status.LastShippedSpanSeq, b.Epoch)
		default:
			e.status.LastShippedEpoch = max(e.status.LastShippedEpoch, b.Epoch)
		}
		e.mu.Unlock()
		// Polite: at most Rate bytes a second.
		if pause := time.Duration(float64(len(b.data))/float64(e.opts.Rate)*float64(time.Second)) - time.Since(began); pause > 0 {
			if !wait(pause) {
				break
			}
		}
	}
	return ctx.Err()
}

// send inserts a batch unless it may have arrived already and did: an
// append-only table is asked for the batch id; a latest table replaces
// rows by key, so sending again is harmless.
func (e *Exporter) send(ctx context.Context, b *batch, f *spoolFile) (alreadyThere bool, err error) {
	var t *Table
	for i := range e.tables {
		if e.tables[i].Name == b.Table {
			t = &e.tables[i]
		}
	}
	if t == nil {
		return false, fmt.Errorf("table %s is no longer shipped", b.Table)
	}
	if e.spool.isMaybe(f) && !t.Latest {
		res, err := e.opts.Client.Query(ctx, fmt.Sprintf("SELECT count() FROM %s WHERE _batch = %s", t.physical(), clickhouse.Quote(b.ID)))
		if err != nil {
			return false, err
		}
		if len(res.Rows) == 1 && toInt(res.Rows[0][0]) > 0 {
			return true, nil
		}
	}
	return false, e.opts.Client.Insert(ctx, t.physical(), b.data)
}

func (e *Exporter) ensureSchema(ctx context.Context) error {
	ch := e.opts.Client
	v, err := ch.Version(ctx)
	if err != nil {
		return err
	}
	if err := ch.CreateDatabase(ctx); err != nil {
		return fmt.Errorf("create database: %w", err)
	}
	for i := range e.tables {
		if err := ensureTable(ctx, ch, &e.tables[i], e.cols[e.tables[i].Name]); err != nil {
			return err
		}
	}
	e.mu.Lock()
	e.status.Server = v
	e.mu.Unlock()
	e.opts.Logf("export: ClickHouse %s at %s, database %s: schema ready", v, ch.URL(), ch.Database())
	return nil
}

// Status is a snapshot of shipping.
func (e *Exporter) Status() Status {
	e.mu.Lock()
	st := e.status
	e.mu.Unlock()
	e.spool.mu.Lock()
	st.SpooledBatches = len(e.spool.files)
	st.SpooledBytes = e.spool.bytes
	st.DroppedBatches = e.spool.state.DroppedBatches
	st.DroppedRows = e.spool.state.DroppedRows
	st.LastSpooledEpoch = e.spool.state.LastEpoch
	st.LastSpooledSpanSeq = e.spool.state.LastSpanSeq
	e.spool.mu.Unlock()
	return st
}
