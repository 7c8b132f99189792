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
	data := fs.String("data", defaultDataDir, "data directory holding the store")
	format := fs.String("format", "table", "output: table, csv or json")
	api := fs.String("api", "", "ask the recorder at this address (default: the one recording into --data, if any)")
	token := fs.String("token", "", "API token")
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
	res, err := answer(*data, *api, *token, q)
	if err != nil {
		return err
	}
	return write(res, stdout)
}

// answer asks the running recorder if there is one, else opens the store.
func answer(dir, addr, token, q string) (*store.Result, error) {
	ctx := context.Background()
	if c, ok := findAgent(dir, addr, token); ok {
		return c.query(ctx, q)
	}
	if addr != "" {
		return nil, fmt.Errorf("no recorder answers at %s", addr)
	}
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
