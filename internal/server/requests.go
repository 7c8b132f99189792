package server

import (
	"bytes"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
)

// registerRequests serves request tracing: a trace's causal path, a
// workload's latency graph (JSON or DOT) and, from a host's own store, the
// virtual performance counters in Prometheus text. In fleet mode paths and
// graphs are built by the same code from the spans every host shipped to
// ClickHouse, so one request's spans from several hosts make one tree.
func registerRequests(mux *http.ServeMux, opts Options) {
	spans := store.Plain(opts.Store)
	if isFleet(opts.Store) {
		spans = requests.Fleet(spans)
	}
	mux.HandleFunc("GET /api/traces/{id}/path", func(w http.ResponseWriter, r *http.Request) {
		p, err := requests.BuildPath(r.Context(), spans, r.PathValue("id"))
		switch {
		case errors.Is(err, requests.ErrBadTraceID):
			writeError(w, http.StatusBadRequest, err.Error())
		case errors.Is(err, requests.ErrNoTrace):
			writeError(w, http.StatusNotFound, err.Error())
		case err != nil:
			writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
		default:
			writeJSON(w, http.StatusOK, p)
		}
	})
	mux.HandleFunc("GET /api/latency-graph", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		wl := requests.Workload{Service: q.Get("service"), Operation: q.Get("operation"), Client: q.Get("client")}
		for name, dst := range map[string]*int64{"from_ns": &wl.FromNs, "to_ns": &wl.ToNs} {
			if v := q.Get(name); v != "" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					writeError(w, http.StatusBadRequest, name+": not an integer of nanoseconds: "+v)
					return
				}
				*dst = n
			}
		}
		if since := q.Get("since"); since != "" {
			d, err := time.ParseDuration(since)
			if err != nil {
				writeError(w, http.StatusBadRequest, "since: "+err.Error())
				return
			}
			wl.FromNs = time.Now().Add(-d).UnixNano()
		}
		if wl.Service == "" || wl.Operation == "" {
			writeError(w, http.StatusBadRequest, "give service= and operation=")
			return
		}
		g, err := requests.BuildGraph(r.Context(), spans, wl)
		if err != nil {
			writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
			return
		}
		if q.Get("format") == "dot" {
			w.Header().Set("Content-Type", "text/vnd.graphviz; charset=utf-8")
			g.WriteDOT(w)
			return
		}
		writeJSON(w, http.StatusOK, g)
	})
	if isFleet(opts.Store) {
		return
	}
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		if err := requests.WriteMetrics(r.Context(), store.Plain(opts.Store), &buf); err != nil {
			writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
			return
		}
		if opts.Metrics != nil {
			opts.Metrics(&buf)
		}
		w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
		w.Write(buf.Bytes())
	})
}
