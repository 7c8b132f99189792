package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
)

func runQuery(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("query", stderr)
	af := addAgentFlags(fs)
	format := fs.String("format", "table", "output: table, csv or json")
	timeout := addQueryTimeout(fs)
	sf := addSourceFlags(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := checkQueryTimeout(*timeout); err != nil {
		return err
	}
	q := strings.TrimSpace(strings.Join(fs.Args(), " "))
	if q == "" {
		return usagef(`missing SQL, e.g. holter query "SELECT * FROM vitals ORDER BY epoch DESC LIMIT 10"`)
	}
	var write func(*store.Result, io.Writer) error
	switch *format {
	case "table":
		write = (*store.Result).WriteTable
	case "csv":
		write = (*store.Result).WriteCSV
	case "json":
		write = (*store.Result).WriteJSON
	default:
		return usagef("unknown format %q (table, csv or json)", *format)
	}
	var res *store.Result
	var err error
	if ch, ok, serr := sf.client(); serr != nil {
		return serr
	} else if ok {
		// The fleet's tables, in ClickHouse's SQL; the server refuses
		// anything that writes.
		res, err = ch.QueryReadOnly(context.Background(), q)
	} else {
		res, err = answer(af, q, *timeout)
	}
	if err != nil {
		return err
	}
	return write(res, stdout)
}

// sourceFlags name a ClickHouse server holding a fleet's recordings.
type sourceFlags struct {
	url, db, user, password *string
	timeout                 time.Duration
}

func addSourceFlags(fs *flag.FlagSet) sourceFlags {
	return sourceFlags{
		url:      fs.String("source", "", "read the fleet's recordings from this ClickHouse HTTP URL instead of one host's store"),
		db:       fs.String("source-db", "holter", "ClickHouse database holding the fleet's tables"),
		user:     fs.String("source-user", "", "ClickHouse user"),
		password: fs.String("source-password", "", "ClickHouse password (or $HOLTER_SOURCE_PASSWORD, kept out of ps)"),
	}
}

// client is the ClickHouse client these flags name, ok=false without --source.
func (f sourceFlags) client() (*clickhouse.Client, bool, error) {
	if *f.url == "" {
		return nil, false, nil
	}
	pw := *f.password
	if pw == "" {
		pw = os.Getenv("HOLTER_SOURCE_PASSWORD")
	}
	ch, err := clickhouse.New(*f.url, &clickhouse.Options{Database: *f.db, User: *f.user, Password: pw, Timeout: f.timeout})
	if err != nil {
		return nil, false, usagef("--source: %v", err)
	}
	return ch, true, nil
}

// answer asks the running recorder if there is one, else opens the store;
// the query may take timeout (the recorder's own limit may be shorter).
func answer(af agentFlags, q string, timeout time.Duration) (*store.Result, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if c, ok := af.agent(); ok {
		return c.query(ctx, q)
	}
	if *af.api != "" {
		return nil, fmt.Errorf("no recorder answers at %s", *af.api)
	}
	dir := *af.data
	st, err := store.Open(dir, &store.Options{ReadOnly: true, QueryTimeout: timeout})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("the store in %s is held by a recorder whose API does not answer: %w", dir, err)
		}
		return nil, err
	}
	defer st.Close()
	return st.Query(ctx, q)
}

// addQueryTimeout adds --query-timeout, the time one SQL query may take.
func addQueryTimeout(fs *flag.FlagSet) *time.Duration {
	return fs.Duration("query-timeout", store.DefaultQueryTimeout, "time one SQL query may take before it is stopped")
}

func checkQueryTimeout(d time.Duration) error {
	if d <= 0 {
		return usagef("--query-timeout %v: give a positive duration, e.g. 30s", d)
	}
	return nil
}
