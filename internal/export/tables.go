package export

import (
	"context"
	"fmt"
	"strings"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
)

// Table says how one store table travels to ClickHouse. Adding a table to
// shipping is adding one of these to the list given to New: its columns
// are read from the store's schema, so only the key and the rows an epoch
// touches need saying.
type Table struct {
	// Name is the table in the store and, for append-only tables, in
	// ClickHouse.
	Name string
	// Key orders the ClickHouse table (MergeTree ORDER BY).
	Key []string
	// Latest tables hold state that later epochs rewrite (a rollup bucket,
	// a finding that grows): ClickHouse keeps them in a ReplacingMergeTree
	// NAME_rows whose newest version per key wins, read through a view
	// NAME that selects FINAL. Others are append-only.
	Latest bool
	// Once skips rows whose key this exporter already shipped (stacks and
	// executables never change once written).
	Once bool
	// Rows is the store query for the rows one epoch added or changed:
	// $1 host, $2 epoch, $3 the epoch's start_ns, $4 its end_ns; for Seq
	// tables, the rows span commits added: $1 host, commit_seq > $2 and
	// <= $3.
	Rows string
	// Seq tables are shipped by span commit sequence (store.SpanTables),
	// not by epoch: spans arrive and are accounted between epochs.
	Seq bool
	// AddHost adds a host column, the exporter's host, to a table that
	// has none in the store (span links, events and accounting: their
	// spans are the host's).
	AddHost bool
	// Chunk splits an epoch's rows into batches of at most this many
	// rows; 0 means DefaultChunk.
	Chunk int
}

// DefaultChunk keeps batches small: one INSERT of fewer rows than the
// server's block size is one part, which arrives wholly or not at all.
const DefaultChunk = 2000

// physical is the ClickHouse table rows are inserted into.
func (t *Table) physical() string {
	if t.Latest {
		return t.Name + "_rows"
	}
	return t.Name
}

// recentNs is how far back changed findings and runs are looked for: the
// online analysis runs at most every 10 s over the epochs since it last
// ran, and a run is added when it ends; rows re-shipped within this window
// are replaced, not duplicated.
const recentNs = "3600000000000"

func bySeq(table string) string {
	return `SELECT * FROM ` + table + ` WHERE commit_seq > $2 AND commit_seq <= $3 ORDER BY commit_seq`
}

// DefaultTables are the store's tables holter ships.
func DefaultTables() []Table {
	var buckets []string
	for _, ts := range store.Timescales {
		w := ts.Width.Nanoseconds()
		buckets = append(buckets, fmt.Sprintf("(timescale = '%s' AND bucket_ns = $3 - $3 %% %d)", ts.Name, w))
	}
	inBuckets := "host = $1 AND (" + strings.Join(buckets, " OR ") + ")"
	epochSamples := "FROM samples WHERE host = $1 AND epoch = $2"
	return []Table{
		{Name: "epochs", Key: []string{"host", "epoch"}, Rows: `SELECT * FROM epochs WHERE host = $1 AND epoch = $2`},
		{Name: "vitals", Key: []string{"host", "epoch", "vital"}, Rows: `SELECT * FROM vitals WHERE host = $1 AND epoch = $2`},
		// Stacks and executables go before the samples that refer to
		// them, so that a sample in ClickHouse always has its stacks.
		{Name: "stacks", Key: []string{"stack_id"}, Latest: true, Once: true,
			Rows: `SELECT * FROM stacks WHERE stack_id IN (SELECT kstack_id ` + epochSamples + ` UNION SELECT ustack_id ` + epochSamples + `)`},
		{Name: "executables", Key: []string{"path"}, Latest: true, Once: true,
			Rows: `SELECT * FROM executables WHERE path IN (SELECT exe ` + epochSamples + `)`},
		{Name: "samples", Key: []string{"host", "epoch", "ts_ns"}, Rows: `SELECT * FROM samples WHERE host = $1 AND epoch = $2 ORDER BY ts_ns`},
		{Name: "rollups", Key: []string{"timescale", "host", "bucket_ns", "vital"}, Latest: true,
			Rows: `SELECT * FROM rollups WHERE ` + inBuckets},
		{Name: "rollup_top", Key: []string{"timescale", "host", "bucket_ns", "vital", "rank"}, Latest: true,
			Rows: `SELECT * FROM rollup_top WHERE ` + inBuckets},
		{Name: "findings", Key: []string{"host", "rule", "timescale", "subject", "start_ns"}, Latest: true,
			Rows: `SELECT * FROM findings WHERE host = $1 AND end_ns >= $3 - ` + recentNs},
		{Name: "runs", Key: []string{"id"}, Latest: true,
			Rows: `SELECT * FROM runs WHERE host = $1 AND end_ns >= $3 - ` + recentNs},
		// Spans are looked up by trace: a causal path reads one trace's
		// spans, links, and accounting from every host.
		{Name: "spans", Key: []string{"trace_id", "span_id"}, Seq: true, Rows: bySeq("spans")},
		{Name: "span_links", Key: []string{"trace_id", "span_id"}, Seq: true, AddHost: true, Rows: bySeq("span_links")},
		{Name: "span_events", Key: []string{"trace_id", "span_id", "ts_ns"}, Seq: true, AddHost: true, Rows: bySeq("span_events")},
		{Name: "span_accounting", Key: []string{"trace_id", "span_id"}, Seq: true, AddHost: true, Rows: bySeq("span_accounting")},
	}
}

// column is one column of a shipped table.
type column struct {
	name, chType string
	boolean      bool // a DuckDB BOOLEAN, sent as 0/1
}

// storeColumns reads a table's columns from the store and gives their
// ClickHouse types.
func storeColumns(ctx context.Context, src Source, table string) ([]column, error) {
	res, err := src.Query(ctx, `SELECT column_name, data_type, is_nullable FROM information_schema.columns
		WHERE table_name = $1 ORDER BY ordinal_position`, table)
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	if len(res.Rows) == 0 {
		return nil, fmt.Errorf("columns of %s: no such table in the store", table)
	}
	var cols []column
	for _, r := range res.Rows {
		name, typ := fmt.Sprint(r[0]), fmt.Sprint(r[1])
		ch := chType(typ)
		if fmt.Sprint(r[2]) == "YES" && !strings.HasPrefix(ch, "Array(") {
			ch = "Nullable(" + ch + ")"
		}
		cols = append(cols, column{name: name, chType: ch, boolean: typ == "BOOLEAN"})
	}
	return cols, nil
}

// chType maps a DuckDB type to the ClickHouse type both 18.16 and current
// servers know. Anything without an exact twin travels as text.
func chType(duck string) string {
	if elem, ok := strings.CutSuffix(duck, "[]"); ok {
		return "Array(" + chType(elem) + ")"
	}
	switch duck {
	case "BIGINT":
		return "Int64"
	case "UBIGINT":
		return "UInt64"
	case "INTEGER":
		return "Int32"
	case "UINTEGER":
		return "UInt32"
	case "SMALLINT":
		return "Int16"
	case "USMALLINT":
		return "UInt16"
	case "TINYINT":
		return "Int8"
	case "UTINYINT", "BOOLEAN":
		return "UInt8"
	case "DOUBLE":
		return "Float64"
	case "FLOAT":
		return "Float32"
	}
	return "String"
}

// ensureTable creates or migrates one table in ClickHouse: missing columns
// are added (the store only ever adds columns), and a latest table's view
// is remade when its columns changed.
func ensureTable(ctx context.Context, ch *clickhouse.Client, t *Table, cols []column) error {
	phys := t.physical()
	var defs []string
	for _, c := range cols {
		defs = append(defs, fmt.Sprintf("`%s` %s", c.name, c.chType))
	}
	defs = append(defs, "_batch String", "_version UInt64")
	engine := "MergeTree"
	if t.Latest {
		engine = "ReplacingMergeTree(_version)"
	}
	ddl := fmt.Sprintf("CREATE TABLE IF NOT EXISTS %s (%s) ENGINE = %s ORDER BY (%s)",
		phys, strings.Join(defs, ", "), engine, strings.Join(t.Key, ", "))
	if err := ch.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create %s: %w", phys, err)
	}
	have, err := chColumns(ctx, ch, phys)
	if err != nil {
		return err
	}
	for _, c := range cols {
		if _, ok := have[c.name]; !ok {
			if err := ch.Exec(ctx, fmt.Sprintf("ALTER TABLE %s ADD COLUMN `%s` %s", phys, c.name, c.chType)); err != nil {
				return fmt.Errorf("migrate %s: %w", phys, err)
			}
		}
	}
	if !t.Latest {
		return nil
	}
	view, err := chColumns(ctx, ch, t.Name)
	if err != nil {
		return err
	}
	if len(view) == len(cols)+2 {
		return nil
	}
	if len(view) > 0 {
		if err := ch.Exec(ctx, "DROP TABLE IF EXISTS "+t.Name); err != nil {
			return fmt.Errorf("migrate view %s: %w", t.Name, err)
		}
	}
	if err := ch.Exec(ctx, fmt.Sprintf("CREATE VIEW IF NOT EXISTS %s AS SELECT * FROM %s FINAL", t.Name, phys)); err != nil {
		return fmt.Errorf("create view %s: %w", t.Name, err)
	}
	return nil
}

func chColumns(ctx context.Context, ch *clickhouse.Client, table string) (map[string]string, error) {
	res, err := ch.Query(ctx, fmt.Sprintf("SELECT name, type FROM system.columns WHERE database = %s AND table = %s",
		clickhouse.Quote(ch.Database()), clickhouse.Quote(table)))
	if err != nil {
		return nil, fmt.Errorf("columns of %s: %w", table, err)
	}
	out := map[string]string{}
	for _, r := range res.Rows {
		out[fmt.Sprint(r[0])] = fmt.Sprint(r[1])
	}
	return out, nil
}
