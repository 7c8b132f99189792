package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

func runQuery(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("query", stderr)
	af := addAgentFlags(fs)
	format := fs.String("format", "table", "output: table, csv or json")
	if err := parse(fs, args); err != nil {
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
	res, err := answer(af, q)
	if err != nil {
		return err
	}
	return write(res, stdout)
}

// answer asks the running recorder if there is one, else opens the store.
func answer(af agentFlags, q string) (*store.Result, error) {
	ctx := context.Background()
	if c, ok := af.agent(); ok {
		return c.query(ctx, q)
	}
	if *af.api != "" {
		return nil, fmt.Errorf("no recorder answers at %s", *af.api)
	}
	dir := *af.data
	st, err := store.Open(dir, &store.Options{ReadOnly: true})
	if err != nil {
		if errors.Is(err, store.ErrLocked) {
			return nil, fmt.Errorf("the store in %s is held by a recorder whose API does not answer: %w", dir, err)
		}
		return nil, err
	}
	defer st.Close()
	return st.Query(ctx, q)
}
