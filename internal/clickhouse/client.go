// Package clickhouse is holter's client of a ClickHouse server over its
// HTTP interface: the fleet store agents ship to and fleet queries read
// from. It uses only what the Debian-packaged server (18.16) and current
// servers both understand — plain HTTP POSTs of SQL, JSONEachRow inserts,
// JSONCompact answers — so no driver is needed and old servers work.
package clickhouse

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// Options configures a Client; nil means defaults.
type Options struct {
	Database string // default "holter"
	User     string // default: the server's default user
	Password string
	Timeout  time.Duration // per request; default 30s
}

// Client talks to one ClickHouse server.
type Client struct {
	base *url.URL
	db   string
	user string
	pass string
	http *http.Client
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// New checks the URL (http or https, e.g. http://ch:8123) and options.
func New(rawURL string, opts *Options) (*Client, error) {
	if opts == nil {
		opts = &Options{}
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("clickhouse url %q: want http://HOST:PORT (the server's HTTP interface)", rawURL)
	}
	c := &Client{base: u, db: opts.Database, user: opts.User, pass: opts.Password,
		http: &http.Client{Timeout: opts.Timeout}}
	if u.User != nil && c.user == "" {
		c.user = u.User.Username()
		c.pass, _ = u.User.Password()
		u.User = nil
	}
	if c.db == "" {
		c.db = "holter"
	}
	if !identRE.MatchString(c.db) {
		return nil, fmt.Errorf("clickhouse database %q: want letters, digits and _", c.db)
	}
	if c.http.Timeout == 0 {
		c.http.Timeout = 30 * time.Second
	}
	return c, nil
}

// Database is the database holter's tables live in.
func (c *Client) Database() string { return c.db }

// URL is the server's address, without credentials.
func (c *Client) URL() string { return c.base.String() }

// ServerError is an answer from ClickHouse refusing a statement, as
// opposed to a failure to reach it.
type ServerError struct {
	Status int
	Msg    string
}

func (e *ServerError) Error() string { return fmt.Sprintf("clickhouse: %s", e.Msg) }

// post sends one statement; body, if any, is its data (an INSERT's rows).
func (c *Client) post(ctx context.Context, query string, body io.Reader, params url.Values) (io.ReadCloser, error) {
	u := *c.base
	q := u.Query()
	for k, vs := range params {
		q[k] = vs
	}
	if params.Get("database") == "" {
		q.Set("database", c.db)
	}
	if body == nil {
		body = strings.NewReader(query)
	} else {
		q.Set("query", query)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), body)
	if err != nil {
		return nil, err
	}
	if c.user != "" {
		req.SetBasicAuth(c.user, c.pass)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("clickhouse %s: %w", c.base.Host, err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return nil, &ServerError{Status: resp.StatusCode, Msg: strings.TrimSpace(string(msg))}
	}
	return resp.Body, nil
}

// CreateDatabase creates the client's database if it does not exist.
func (c *Client) CreateDatabase(ctx context.Context) error {
	// Asked in the default database: the server refuses a request naming
	// a database that does not exist yet.
	rc, err := c.post(ctx, "CREATE DATABASE IF NOT EXISTS "+c.db, nil, url.Values{"database": {"default"}})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, rc)
	return rc.Close()
}

// Exec runs a statement that returns nothing of interest (DDL).
func (c *Client) Exec(ctx context.Context, query string) error {
	rc, err := c.post(ctx, query, nil, nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, rc)
	return rc.Close()
}

// Insert sends rows, already encoded as JSONEachRow, to table.
func (c *Client) Insert(ctx context.Context, table string, rows []byte) error {
	if !identRE.MatchString(table) {
		return fmt.Errorf("clickhouse insert: bad table name %q", table)
	}
	rc, err := c.post(ctx, "INSERT INTO "+table+" FORMAT JSONEachRow", bytes.NewReader(rows), nil)
	if err != nil {
		return err
	}
	io.Copy(io.Discard, rc)
	return rc.Close()
}

// Version is the server's version, e.g. "18.16.1".
func (c *Client) Version(ctx context.Context) (string, error) {
	res, err := c.query(ctx, "SELECT version()", url.Values{"database": {"default"}})
	if err != nil {
		return "", err
	}
	if len(res.Rows) != 1 {
		return "", errors.New("clickhouse: SELECT version() returned no row")
	}
	return fmt.Sprint(res.Rows[0][0]), nil
}

// Query runs one statement and returns its rows. Integers come back as
// JSON numbers (int64 or uint64 when they fit), as the local store gives
// them.
func (c *Client) Query(ctx context.Context, query string) (*store.Result, error) {
	return c.query(ctx, query, nil)
}

// QueryReadOnly is Query with the server refusing anything that writes
// (the readonly=1 setting): what fleet users' SQL goes through.
func (c *Client) QueryReadOnly(ctx context.Context, query string) (*store.Result, error) {
	return c.query(ctx, query, url.Values{"readonly": {"1"}})
}

func (c *Client) query(ctx context.Context, query string, params url.Values) (*store.Result, error) {
	q := strings.TrimRight(strings.TrimSpace(query), ";")
	if params == nil {
		params = url.Values{}
	}
	params.Set("output_format_json_quote_64bit_integers", "0")
	params.Set("max_result_rows", fmt.Sprint(store.DefaultMaxResultRows+1))
	params.Set("result_overflow_mode", "break")
	rc, err := c.post(ctx, q+"\nFORMAT JSONCompact", nil, params)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	var ans struct {
		Meta []struct{ Name, Type string }
		Data [][]json.RawMessage
	}
	if err := json.NewDecoder(rc).Decode(&ans); err != nil {
		return nil, fmt.Errorf("clickhouse: read answer: %w", err)
	}
	res := &store.Result{Rows: [][]any{}}
	for _, m := range ans.Meta {
		res.Columns = append(res.Columns, m.Name)
		res.Types = append(res.Types, m.Type)
	}
	for _, raw := range ans.Data {
		if len(res.Rows) == store.DefaultMaxResultRows {
			res.Truncated = true
			break
		}
		row := make([]any, len(raw))
		for i, cell := range raw {
			row[i] = decodeCell(cell)
		}
		res.Rows = append(res.Rows, row)
	}
	return res, nil
}

// decodeCell keeps integers exact: a JSON number without a fraction
// becomes int64 (or uint64 beyond it), arrays become []any.
func decodeCell(raw json.RawMessage) any {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return string(raw)
	}
	return fromJSON(v)
}

func fromJSON(v any) any {
	switch x := v.(type) {
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		var u uint64
		if _, err := fmt.Sscan(x.String(), &u); err == nil && !strings.ContainsAny(x.String(), ".eE-") {
			return u
		}
		f, _ := x.Float64()
		return f
	case []any:
		for i := range x {
			x[i] = fromJSON(x[i])
		}
		return x
	}
	return v
}

// Quote is s as a ClickHouse string literal.
func Quote(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	return "'" + r.Replace(s) + "'"
}
