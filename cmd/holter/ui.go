package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
)

// fleetTimeout bounds one ClickHouse request of the fleet UI: a server
// that stops answering is an error on the page, not a page that hangs.
const fleetTimeout = 15 * time.Second

// runUI serves the web UI over a stored recording, without recording, or
// over the fleet's recordings in ClickHouse (--source).
func runUI(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("ui", stderr)
	data := valueFlag(fs, "data", defaultDataDir(), dataHelp, nonEmpty)
	serve := addServeFlags(fs, "address to serve the UI and its API on")
	queryTimeout := addQueryTimeout(fs)
	sf := addSourceFlags(fs)
	sf.timeout = fleetTimeout
	if err := parse(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	if *serve.api == "" {
		return usagef("--api: give the address to serve the UI on")
	}
	if err := serve.check(); err != nil {
		return err
	}
	ch, fleet, err := sf.client()
	if err != nil {
		return err
	}
	var src server.Querier
	var what string
	if fleet {
		src = server.Fleet{Client: ch}
		what = fmt.Sprintf("the fleet in %s (database %s)", ch.URL(), ch.Database())
		// Served whatever the answer: the page says what is wrong until
		// the server answers.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := ch.Version(ctx); err != nil {
			fmt.Fprintf(stderr, "holter ui: warning: ClickHouse at %s does not answer yet: %v\n", ch.URL(), err)
		}
		cancel()
	} else {
		// The data directory may not be this user's to write: Parquet
		// exports go through a private temporary directory.
		exportDir, err := os.MkdirTemp("", "holter-ui-export-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(exportDir)
		st, err := store.Open(*data, &store.Options{ReadOnly: true, QueryTimeout: *queryTimeout, ExportDir: exportDir})
		if err != nil {
			if errors.Is(err, store.ErrLocked) {
				// DuckDB lets one process at a time hold the file: the recorder
				// serves the same UI itself.
				if info, ok := readAgentInfo(*data); ok && info.API != "" {
					return fmt.Errorf("a recorder (pid %d) is recording into %s and holds its store; its UI is at http://%s", info.Pid, *data, info.API)
				}
				return fmt.Errorf("another process holds the store in %s (a recorder started with --api \"\"?); stop it, or open the UI of a recorder started with --api: %w", *data, err)
			}
			return err
		}
		defer st.Close()
		src, what = st, st.Path()
	}
	logf := func(format string, a ...any) { fmt.Fprintf(stderr, "holter ui: "+format+"\n", a...) }
	tokenDir := *data
	if fleet {
		tokenDir = ""
	}
	opts, err := serve.options(tokenDir, logf)
	if err != nil && !fleet {
		// A recording this user may read but not write to: the token
		// lasts this run.
		logf("warning: %v; the UI's token is made for this run alone", err)
		opts, err = serve.options("", logf)
	}
	if err != nil {
		return err
	}
	opts.Store = src
	srv, err := server.Listen(opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		srv.Shutdown(context.Background())
	}()
	fmt.Fprintf(stdout, "holter UI for %s on %s\n", what, server.LoginURL(srv.Addr(), opts.Token))
	return srv.Serve()
}
