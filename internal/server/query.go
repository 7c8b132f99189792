package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/store"
)

// rowsQuerier streams an answer rather than building it: *store.Store.
type rowsQuerier interface {
	QueryRows(ctx context.Context, sql string, args ...any) (*store.Rows, error)
}

// registerQuery serves /api/query: one read-only statement, as q= or as
// the body. A store's answer is written row by row as it is read, within
// the store's limits of time, rows and bytes; a store that is busy says
// so with a 503 and Retry-After.
func registerQuery(mux *http.ServeMux, opts Options) {
	query := func(w http.ResponseWriter, r *http.Request, q string) {
		if strings.TrimSpace(q) == "" {
			writeError(w, http.StatusBadRequest, "missing query: pass it as q= or as the request body")
			return
		}
		rq, ok := opts.Store.(rowsQuerier)
		if !ok {
			res, err := opts.Store.Query(r.Context(), q)
			if err != nil {
				writeQueryError(w, err)
				return
			}
			writeJSON(w, http.StatusOK, res)
			return
		}
		rows, err := rq.QueryRows(r.Context(), q)
		if err != nil {
			writeQueryError(w, err)
			return
		}
		defer rows.Close()
		w.Header().Set("Content-Type", "application/json")
		// An error past this point (the time limit, the client gone) ends
		// the answer's JSON with "error"; the status is sent already.
		rows.EncodeResult(w)
	}
	mux.HandleFunc("GET /api/query", func(w http.ResponseWriter, r *http.Request) {
		query(w, r, r.URL.Query().Get("q"))
	})
	mux.HandleFunc("POST /api/query", func(w http.ResponseWriter, r *http.Request) {
		if q, ok := queryBody(w, r); ok {
			query(w, r, q)
		}
	})
	mux.HandleFunc("POST /api/export/parquet", func(w http.ResponseWriter, r *http.Request) {
		pe, ok := opts.Store.(parquetExporter)
		if !ok {
			writeError(w, http.StatusNotFound, "Parquet export reads a host's own store: "+noRecorder(opts))
			return
		}
		q, ok := queryBody(w, r)
		if !ok {
			return
		}
		if strings.TrimSpace(q) == "" {
			writeError(w, http.StatusBadRequest, "missing query: pass it as the request body")
			return
		}
		path, rows, err := pe.ExportParquet(r.Context(), q)
		if err != nil {
			writeQueryError(w, err)
			return
		}
		defer os.Remove(path)
		f, err := os.Open(path)
		if err != nil {
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			w.Header().Set("Content-Length", strconv.FormatInt(st.Size(), 10))
		}
		w.Header().Set("Content-Type", "application/vnd.apache.parquet")
		w.Header().Set("X-Holter-Rows", strconv.FormatInt(rows, 10))
		io.Copy(w, f)
	})
}

// parquetExporter writes a query's rows as a Parquet file: *store.Store.
type parquetExporter interface {
	ExportParquet(ctx context.Context, query string) (path string, rows int64, err error)
}

// queryBody reads a query sent as a request's body (at most
// MaxQueryBytes); false when it answered the request with the error.
func queryBody(w http.ResponseWriter, r *http.Request) (string, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxQueryBytes+1))
	if err != nil {
		writeError(w, http.StatusBadRequest, "read query: "+err.Error())
		return "", false
	}
	if len(body) > MaxQueryBytes {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("query longer than %d bytes", MaxQueryBytes))
		return "", false
	}
	return string(body), true
}

// writeQueryError answers a query that failed: 503 with Retry-After when
// the store runs as many queries as it may, 504 at the time limit, an
// httpError's own code, else 400 (the query is the user's).
func writeQueryError(w http.ResponseWriter, err error) {
	writeError(w, queryErrorCode(w, err, http.StatusBadRequest), err.Error())
}

// queryErrorCode is the status for a store's error, def for one it does
// not know; it sets Retry-After for a busy store.
func queryErrorCode(w http.ResponseWriter, err error, def int) int {
	switch {
	case errors.Is(err, store.ErrBusy):
		w.Header().Set("Retry-After", "1")
		return http.StatusServiceUnavailable
	case errors.Is(err, store.ErrQueryTimeout):
		return http.StatusGatewayTimeout
	}
	return errorCode(err, def)
}
