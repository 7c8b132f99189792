package server

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/tracequery"
)

// TraceRequest is the body of POST /api/trace.
type TraceRequest struct {
	Query      string `json:"query"`
	Interval   string `json:"interval,omitempty"` // Go duration; default 1s
	For        string `json:"for,omitempty"`      // Go duration; default: until the client leaves
	Save       string `json:"save,omitempty"`
	UnsafeRead bool   `json:"unsafe_read,omitempty"`
	MapSize    int    `json:"map_size,omitempty"`
	Explain    bool   `json:"explain,omitempty"`
	Window     string `json:"window,omitempty"` // Go duration: answer over a sliding window, moving by Interval
	PID        int    `json:"pid,omitempty"`    // trace this process only`
	// Partials asks for each interval's partial rows, for a coordinator
	// running the query across hosts (holter trace --hosts).
	Partials bool `json:"partials,omitempty"`
}

// TraceLine is one NDJSON line of the answer: an interval, an explanation,
// or an error; for a per-event query, its columns once, then each row as it
// comes, and intervals with their counters alone.
type TraceLine struct {
	Attached bool              `json:"attached,omitempty"` // the probes are attached (the first line of a run)
	Columns  []string          `json:"columns,omitempty"`
	Row      []any             `json:"row,omitempty"`
	Start    *time.Time        `json:"start,omitempty"`
	End      *time.Time        `json:"end,omitempty"`
	Result   *store.Result     `json:"result,omitempty"`
	Counters map[string]uint64 `json:"counters,omitempty"`
	Explain  string            `json:"explain,omitempty"`
	Error    string            `json:"error,omitempty"`
}

// traceSaver is a store that keeps live query results.
type traceSaver interface {
	SaveTrace(ctx context.Context, name string, start, end time.Time, res *store.Result) error
}

// registerTrace adds POST /api/trace: the agent runs a live query and
// streams each interval as a line of NDJSON until For passes or the
// client goes away.
func registerTrace(mux *http.ServeMux, opts Options) {
	limits := &traceLimits{max: cmp.Or(opts.MaxTraces, DefaultMaxTraces), maxBytes: cmp.Or(opts.MaxTraceBytes, DefaultMaxTraceBytes)}
	mux.HandleFunc("POST /api/trace", func(w http.ResponseWriter, r *http.Request) {
		var req TraceRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, MaxQueryBytes)).Decode(&req); err != nil {
			writeError(w, http.StatusBadRequest, "read trace request: "+err.Error())
			return
		}
		if req.UnsafeRead && roleOf(r.Context()) < access.Root {
			writeError(w, http.StatusForbidden, "unsafe_read lets str() read any process's memory: it needs root on the socket, or the admin token")
			return
		}
		text, ok := tracequery.Resolve(req.Query)
		if !ok {
			writeError(w, http.StatusBadRequest, "no ready query "+req.Query)
			return
		}
		ro := tracequery.RunOptions{Partials: req.Partials}
		if opts.Store != nil {
			// A WITH query joins the live rows with this store's tables.
			ro.Recorded = store.Plain(opts.Store)
		}
		for _, d := range []struct {
			s   string
			dst *time.Duration
		}{{req.Interval, &ro.Interval}, {req.For, &ro.Duration}, {req.Window, &ro.Window}} {
			if d.s == "" {
				continue
			}
			v, err := time.ParseDuration(d.s)
			if err != nil || v < 0 {
				writeError(w, http.StatusBadRequest, "bad duration "+d.s)
				return
			}
			*d.dst = v
		}
		// The catalog reads tracefs, which a fresh mount namespace (ip
		// netns exec, a container) may lack.
		tracequery.EnsureTraceFS()
		plan, err := tracequery.Compile(text, &tracequery.Catalog{PID: req.PID}, &tracequery.Options{UnsafeRead: req.UnsafeRead, MapSize: req.MapSize, PID: req.PID})
		if err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		var saver traceSaver
		if req.Save != "" {
			if saver, ok = opts.Store.(traceSaver); !ok {
				writeError(w, http.StatusBadRequest, "this server's store cannot save results")
				return
			}
			if _, err := store.TraceTable(req.Save); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		enc := json.NewEncoder(w)
		flush := func() {
			if f, ok := w.(http.Flusher); ok {
				f.Flush()
			}
		}
		if req.Explain || plan.Query.Explain {
			ex, err := plan.Explain(false)
			line := TraceLine{Explain: ex}
			if err != nil {
				line = TraceLine{Error: err.Error()}
			}
			enc.Encode(line)
			return
		}
		release, refused := limits.acquire(plan.MapBytes())
		if refused != nil {
			writeError(w, refused.code, refused.msg)
			return
		}
		defer release()
		// Said at once, so that a client knows the trace was admitted
		// before its first interval ends.
		w.WriteHeader(http.StatusOK)
		flush()
		var mu sync.Mutex // rows come from the probes' reader, intervals from the run
		perEvent := plan.PerEvent && saver == nil && !req.Partials && ro.Window == 0
		ro.Attached = func() {
			mu.Lock()
			defer mu.Unlock()
			enc.Encode(TraceLine{Attached: true})
			if perEvent {
				enc.Encode(TraceLine{Columns: plan.Columns})
			}
			flush()
		}
		if perEvent {
			ro.Row = func(row []any) error {
				mu.Lock()
				defer mu.Unlock()
				r := &store.Result{Rows: [][]any{row}}
				r.Sanitize()
				if err := enc.Encode(TraceLine{Row: r.Rows[0]}); err != nil {
					return err
				}
				flush()
				return nil
			}
		}
		err = tracequery.Run(r.Context(), plan, ro, func(iv *tracequery.Interval) error {
			mu.Lock()
			defer mu.Unlock()
			if ro.Row != nil {
				if len(iv.Counters) > 0 {
					enc.Encode(TraceLine{Start: &iv.Start, End: &iv.End, Counters: iv.Counters})
					flush()
				}
				return nil
			}
			iv.Result.Sanitize()
			if saver != nil {
				if err := saver.SaveTrace(context.WithoutCancel(r.Context()), req.Save, iv.Start, iv.End, iv.Result); err != nil {
					return err
				}
			}
			if err := enc.Encode(TraceLine{Start: &iv.Start, End: &iv.End, Result: iv.Result, Counters: iv.Counters}); err != nil {
				return err
			}
			flush()
			return nil
		})
		if err != nil && !errors.Is(err, context.Canceled) {
			enc.Encode(TraceLine{Error: err.Error()})
		}
	})
}
