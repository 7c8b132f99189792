package store

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/engine"
)

// The read-only sandbox. A query is checked before anything of it runs,
// by DuckDB's own parser: json_serialize_sql parses the text without
// binding or running it, and serializes it only if every statement in it
// is a SELECT (which DESCRIBE, SHOW, SUMMARIZE, FROM-first, VALUES, TABLE
// and PIVOT with its IN list are, once parsed); the text must hold exactly
// one. Its syntax tree is then searched for the functions a SELECT can
// reach that change something or leave the database (checkpoint(),
// query(), read_csv(), nextval(), …): table functions must be on a list of
// those that only read the catalog or make rows, and scalar functions
// DuckDB says have side effects are refused unless known harmless.
//
// EXPLAIN is not serialized (EXPLAIN ANALYZE runs its statement), so the
// sandbox reads the words EXPLAIN [ANALYZE] or EXPLAIN (option, …) itself,
// checks the statement after them as above, and runs an EXPLAIN it writes
// from those parts: what runs is always text the parser checked, whatever
// the reading of the prefix.
//
// The statement is then prepared with the driver's one-statement Prepare,
// which refuses text of several statements without running any (its
// PrepareContext would run all but the last), and its type must be SELECT
// or EXPLAIN. It runs on a connection of its own, closed after it, under
// the store's settings: no file or network access, no extension loaded,
// the configuration locked.

// ErrNotReadOnly is returned for a statement that is not a query.
var ErrNotReadOnly = errors.New("not allowed: queries are read-only, one statement (SELECT, WITH, FROM, VALUES, SHOW, DESCRIBE, SUMMARIZE or EXPLAIN) that reads the recording only")

// readTableFunctions are the table functions a query may call: they read
// the catalog and settings or make rows, and touch no file, network,
// secret, log or checkpoint. Any other (checkpoint, query, read_*, glob,
// arrow_scan, enable_logging, a new one in a newer DuckDB) is refused.
var readTableFunctions = setOf(
	"range", "generate_series", "unnest", "repeat", "repeat_row", "json_each", "json_tree",
	"summary", "test_all_types", "test_vector_types",
	"icu_calendar_names", "pg_timezone_names", "sql_auto_complete",
	"duckdb_approx_database_count", "duckdb_columns", "duckdb_connection_count", "duckdb_constraints",
	"duckdb_databases", "duckdb_dependencies", "duckdb_functions", "duckdb_indexes", "duckdb_keywords",
	"duckdb_memory", "duckdb_optimizers", "duckdb_prepared_statements", "duckdb_schemas", "duckdb_sequences",
	"duckdb_settings", "duckdb_table_sample", "duckdb_tables", "duckdb_temporary_files", "duckdb_types",
	"duckdb_variables", "duckdb_views",
	"pragma_collations", "pragma_database_size", "pragma_metadata_info", "pragma_platform", "pragma_show",
	"pragma_storage_info", "pragma_table_info", "pragma_user_agent", "pragma_version",
)

// harmlessSideEffects are scalar functions DuckDB marks as having side
// effects that change nothing a later query or commit sees: random
// numbers, ids of the current query, error().
var harmlessSideEffects = setOf(
	"random", "gen_random_uuid", "uuid", "uuidv4", "uuidv7", "error", "stats",
	"current_query", "current_query_id", "current_connection_id", "current_transaction_id",
)

// sqlTakingFunctions take SQL text as a value and bind or run it, out of
// the check's sight.
var sqlTakingFunctions = setOf("json_serialize_plan", "json_execute_serialized_sql", "query", "query_table")

func setOf(names ...string) map[string]bool {
	m := make(map[string]bool, len(names))
	for _, n := range names {
		m[n] = true
	}
	return m
}

// sideEffectFunctions lists the scalar and aggregate functions a query
// may not call: those DuckDB marks as having side effects (nextval,
// setseed, write_log, …) but the harmless ones, and those taking SQL.
func sideEffectFunctions(db *sql.DB) (map[string]bool, error) {
	rows, err := db.Query(`SELECT DISTINCT lower(function_name) FROM duckdb_functions()
		WHERE has_side_effects AND function_type IN ('scalar', 'aggregate')`)
	if err != nil {
		return nil, fmt.Errorf("list functions with side effects: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for n := range sqlTakingFunctions {
		out[n] = true
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			return nil, fmt.Errorf("list functions with side effects: %w", err)
		}
		// engine.BudgetFunction, the store's own, is allowed in the bounded
		// form alone (checkFunctions).
		if !harmlessSideEffects[name] && name != engine.BudgetFunction {
			out[name] = true
		}
	}
	return out, rows.Err()
}

// sandbox is the text to run for query, once checked on conn, and the
// statement type it must prepare to.
// A text passed once passes again (the check depends on nothing else), so
// the texts that passed are remembered: the API's queries repeat, with
// other arguments, and the check costs as much as a small query.
func (s *Store) sandbox(ctx context.Context, conn driver.Conn, query string) (passed, error) {
	s.passedMu.Lock()
	p, ok := s.passed[query]
	s.passedMu.Unlock()
	if ok {
		return p, nil
	}
	explain, body, err := cutExplain(query)
	if err != nil {
		return passed{}, err
	}
	if err := s.checkSelect(ctx, conn, body, false); err != nil {
		return passed{}, err
	}
	if explain != "" {
		p = passed{run: explain + " " + body, want: engine.StatementExplain}
	} else {
		p = passed{run: budgeted(body, s.opts.MaxResultRows), want: engine.StatementSelect, budgeted: true}
		// What runs is checked as what was sent: a mistake in the
		// wrapping is an error, never another statement.
		if err := s.checkSelect(ctx, conn, p.run, true); err != nil {
			return passed{}, fmt.Errorf("%w (in the query as bounded: %s)", err, p.run)
		}
	}
	s.passedMu.Lock()
	if len(s.passed) >= maxPassed {
		clear(s.passed)
	}
	s.passed[query] = p
	s.passedMu.Unlock()
	return p, nil
}

// passed is a text the sandbox let through: what to run for it, the type
// of statement that must prepare, and whether its rows go through
// engine.BudgetFunction.
type passed struct {
	run      string
	want     engine.StmtType
	budgeted bool
}

// maxPassed bounds the texts remembered; past it they are forgotten.
const maxPassed = 512

// budgeted is a query whose rows DuckDB stops making past maxRows rows or
// the byte budget of engine.BudgetFunction: it holds a query's whole answer
// before the first row is read, outside its memory limit. The query is a
// subquery (column names repeated in it get a suffix), ended by a newline
// against a closing comment and stripped of the semicolons after it; a
// projection, not a filter, calls engine.BudgetFunction, so that DuckDB does not
// move it below the query's ORDER BY.
func budgeted(query string, maxRows int) string {
	return "SELECT * EXCLUDE (holter_within_budget) FROM (SELECT *, " + engine.BudgetFunction +
		"(strlen(concat_ws('', *COLUMNS(*)))) AS holter_within_budget FROM (\n" +
		trimSemicolons(query) + "\n)) WHERE holter_within_budget LIMIT " + strconv.Itoa(maxRows+1)
}

// trimSemicolons removes the semicolons that end text, with the white
// space and comments around them.
func trimSemicolons(text string) string {
	for {
		i := strings.LastIndexByte(text, ';')
		if i < 0 || skipSpace(text[i+1:], 0) < len(text)-i-1 {
			return text
		}
		text = text[:i]
	}
}

// serialized is json_serialize_sql's answer.
type serialized struct {
	Error        bool   `json:"error"`
	ErrorType    string `json:"error_type"`
	ErrorMessage string `json:"error_message"`
	Position     any    `json:"position"`
	Statements   []any  `json:"statements"`
}

// checkSelect passes text of one SELECT statement calling no function the
// sandbox refuses; budget allows engine.BudgetFunction, which the store adds.
func (s *Store) checkSelect(ctx context.Context, conn driver.Conn, text string, budget bool) error {
	out, err := parseOnly(ctx, conn, text)
	if err != nil {
		return fmt.Errorf("query: parse: %w", err)
	}
	var tree serialized
	d := json.NewDecoder(strings.NewReader(out))
	d.UseNumber()
	if err := d.Decode(&tree); err != nil {
		return fmt.Errorf("query: parse: %w", err)
	}
	if tree.Error {
		if tree.ErrorType == "parser" {
			at := ""
			if tree.Position != nil {
				at = fmt.Sprintf(" (at offset %v)", tree.Position)
			}
			return fmt.Errorf("query: %s%s", tree.ErrorMessage, at)
		}
		return fmt.Errorf("query: %s: %w", notAQuery(text), ErrNotReadOnly)
	}
	switch len(tree.Statements) {
	case 0:
		return errors.New("query: no statement in the text")
	case 1:
	default:
		return fmt.Errorf("query: %d statements: %w", len(tree.Statements), ErrNotReadOnly)
	}
	return s.checkFunctions(tree.Statements[0], budget)
}

// parseOnly is json_serialize_sql of text, run on conn.
func parseOnly(ctx context.Context, conn driver.Conn, text string) (string, error) {
	stmt, err := conn.Prepare(`SELECT json_serialize_sql($1::VARCHAR, skip_null := true, skip_empty := true)::VARCHAR`)
	if err != nil {
		return "", err
	}
	defer stmt.Close()
	q, ok := stmt.(driver.StmtQueryContext)
	if !ok {
		return "", fmt.Errorf("unexpected statement %T", stmt)
	}
	rows, err := q.QueryContext(ctx, []driver.NamedValue{{Ordinal: 1, Value: text}})
	if err != nil {
		return "", err
	}
	defer rows.Close()
	dest := make([]driver.Value, 1)
	if err := rows.Next(dest); err != nil {
		if err == io.EOF {
			return "", errors.New("json_serialize_sql returned no row")
		}
		return "", err
	}
	out, ok := dest[0].(string)
	if !ok {
		return "", fmt.Errorf("json_serialize_sql returned %T", dest[0])
	}
	return out, nil
}

// checkFunctions walks a statement's syntax tree: every table function
// (a TABLE_FUNCTION reference) must read only, no function may be one
// with side effects, and a table (a BASE_TABLE reference) must be named,
// not be a file's path or pattern, which DuckDB would read (a replacement
// scan) where file access is allowed: the export directory.
func (s *Store) checkFunctions(node any, budget bool) error {
	switch n := node.(type) {
	case map[string]any:
		if n["type"] == "BASE_TABLE" {
			if name, _ := n["table_name"].(string); strings.ContainsAny(name, fileNameChars) {
				return fmt.Errorf("query: table %q names a file: %w", name, ErrNotReadOnly)
			}
		}
		if n["type"] == "TABLE_FUNCTION" {
			fn, _ := n["function"].(map[string]any)
			name, _ := fn["function_name"].(string)
			if !readTableFunctions[asciiLower(name)] {
				return fmt.Errorf("query: table function %s(): %w", name, ErrNotReadOnly)
			}
		}
		if name, ok := n["function_name"].(string); ok {
			if lower := asciiLower(name); s.sideEffects[lower] || lower == engine.BudgetFunction && !budget {
				return fmt.Errorf("query: function %s(): %w", name, ErrNotReadOnly)
			}
		}
		for _, v := range n {
			if err := s.checkFunctions(v, budget); err != nil {
				return err
			}
		}
	case []any:
		for _, v := range n {
			if err := s.checkFunctions(v, budget); err != nil {
				return err
			}
		}
	}
	return nil
}

// fileNameChars are those of a file's path or pattern that no table of
// the store has in its name.
const fileNameChars = "/\\.:~*?[{"

// asciiLower folds case as DuckDB does when it looks a function up.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// notAQuery names what a refused text starts with, for the error.
func notAQuery(text string) string {
	w, _ := word(text, skipSpace(text, 0))
	switch up := strings.ToUpper(w); up {
	case "":
		return "not a query"
	case "SELECT", "WITH", "FROM", "VALUES", "TABLE", "SHOW", "DESCRIBE", "SUMMARIZE", "PIVOT", "UNPIVOT":
		return "more than one statement, or one that writes"
	default:
		return up + " statement"
	}
}

// explainOptions are the EXPLAIN options a query may give, and the text
// each is run as.
var explainFormats = setOf("text", "json", "html", "graphviz", "yaml")

// cutExplain splits EXPLAIN's words from the statement they explain:
// explain is "" when text is no EXPLAIN, else the canonical EXPLAIN to
// run before body.
func cutExplain(text string) (explain, body string, err error) {
	w, after := word(text, skipSpace(text, 0))
	if !strings.EqualFold(w, "explain") {
		return "", text, nil
	}
	i := skipSpace(text, after)
	w, j := word(text, i)
	switch {
	case strings.EqualFold(w, "analyze") || strings.EqualFold(w, "analyse"):
		return "EXPLAIN ANALYZE", text[j:], nil
	case i < len(text) && text[i] == '(':
		// EXPLAIN (options) or EXPLAIN (SELECT …).
		k := skipSpace(text, i+1)
		if first, _ := word(text, k); !isExplainOption(first) {
			return "EXPLAIN", text[i:], nil
		}
		var opts []string
		for {
			opt, e := word(text, k)
			k = skipSpace(text, e)
			switch {
			case strings.EqualFold(opt, "analyze") || strings.EqualFold(opt, "analyse"):
				opts = append(opts, "ANALYZE")
			case strings.EqualFold(opt, "format"):
				f, e := word(text, k)
				if !explainFormats[strings.ToLower(f)] {
					return "", "", fmt.Errorf("query: EXPLAIN FORMAT %q (the formats are text, json, html, graphviz and yaml): %w", f, ErrNotReadOnly)
				}
				opts = append(opts, "FORMAT "+strings.ToUpper(f))
				k = skipSpace(text, e)
			default:
				return "", "", fmt.Errorf("query: EXPLAIN option %q (EXPLAIN takes ANALYZE and FORMAT): %w", opt, ErrNotReadOnly)
			}
			if k < len(text) && text[k] == ',' {
				k = skipSpace(text, k+1)
				continue
			}
			if k < len(text) && text[k] == ')' {
				return "EXPLAIN (" + strings.Join(opts, ", ") + ")", text[k+1:], nil
			}
			return "", "", fmt.Errorf("query: EXPLAIN options: expected , or ) at offset %d: %w", k, ErrNotReadOnly)
		}
	}
	return "EXPLAIN", text[after:], nil
}

func isExplainOption(w string) bool {
	return strings.EqualFold(w, "analyze") || strings.EqualFold(w, "analyse") || strings.EqualFold(w, "format")
}

// skipSpace skips white space and comments (-- to the end of the line,
// and /* */, which nest) from i.
func skipSpace(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == ' ' || s[i] == '\t' || s[i] == '\n' || s[i] == '\r' || s[i] == '\f' || s[i] == '\v':
			i++
		case strings.HasPrefix(s[i:], "--"):
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case strings.HasPrefix(s[i:], "/*"):
			depth := 0
			for i < len(s) {
				if strings.HasPrefix(s[i:], "/*") {
					depth++
					i += 2
				} else if strings.HasPrefix(s[i:], "*/") {
					depth--
					i += 2
					if depth == 0 {
						break
					}
				} else {
					i++
				}
			}
		default:
			return i
		}
	}
	return i
}

// word is the ASCII word (letters, digits, _) at i and where it ends.
func word(s string, i int) (string, int) {
	j := i
	for j < len(s) && (s[j] == '_' || 'a' <= s[j]|0x20 && s[j]|0x20 <= 'z' || j > i && '0' <= s[j] && s[j] <= '9') {
		j++
	}
	return s[i:j], j
}
