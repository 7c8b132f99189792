// Package server is holter's HTTP API: what the CLI and the web UI use to
// reach a running recorder. It listens on loopback unless told otherwise,
// and then only with a token.
package server

import (
	"context"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/findings"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/ui"
)

// Querier answers read-only SQL, args filling its placeholders;
// *store.Store is one.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (*store.Result, error)
}

// Options configures a Server.
type Options struct {
	Addr  string // host:port; loopback unless Token is set
	Token string
	Store Querier
	// Status reports the recorder; nil when serving a stored recording.
	Status func() any
	// Metrics writes the recorder's own counters in Prometheus text,
	// after the virtual counters on /metrics; nil when serving a stored
	// recording.
	Metrics func(w io.Writer)
	// SetVital starts or stops one vital; nil when serving a stored recording.
	SetVital func(name string, on bool) error
	// AddRun adds a run to the catalog; nil when serving a stored recording.
	AddRun func(ctx context.Context, r store.Run) error
	// Boost samples the block requests of a process tree each, or ends
	// that (recorder.Boost); nil when serving a stored recording.
	Boost func(pid uint32, on bool) error
}

// Server is a running API server.
type Server struct {
	http *http.Server
	ln   net.Listener
}

// MaxQueryBytes bounds a query's text.
const MaxQueryBytes = 1 << 20

// Listen checks the address policy and binds.
func Listen(opts Options) (*Server, error) {
	host, _, err := net.SplitHostPort(opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("api address %q: %w", opts.Addr, err)
	}
	if !isLoopback(host) && opts.Token == "" {
		return nil, fmt.Errorf("api address %q is not loopback: give a token (--token) to listen there", opts.Addr)
	}
	ln, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("api listen on %s: %w", opts.Addr, err)
	}
	mux := http.NewServeMux()
	s := &Server{ln: ln, http: &http.Server{Handler: withToken(opts.Token, mux), ReadHeaderTimeout: 10 * time.Second}}
	mux.HandleFunc("GET /api/status", func(w http.ResponseWriter, r *http.Request) {
		if opts.Status == nil {
			writeError(w, http.StatusNotFound, noRecorder(opts))
			return
		}
		writeJSON(w, http.StatusOK, opts.Status())
	})
	mux.HandleFunc("POST /api/vitals/{name}", func(w http.ResponseWriter, r *http.Request) {
		if opts.SetVital == nil {
			writeError(w, http.StatusNotFound, noRecorder(opts))
			return
		}
		var on bool
		switch r.URL.Query().Get("enabled") {
		case "true", "1":
			on = true
		case "false", "0":
		default:
			writeError(w, http.StatusBadRequest, "say enabled=true or enabled=false")
			return
		}
		if err := opts.SetVital(r.PathValue("name"), on); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, opts.Status())
	})
	query := func(w http.ResponseWriter, r *http.Request, q string) {
		if strings.TrimSpace(q) == "" {
			writeError(w, http.StatusBadRequest, "missing query: pass it as q= or as the request body")
			return
		}
		res, err := opts.Store.Query(r.Context(), q)
		if err != nil {
			writeError(w, errorCode(err, http.StatusBadRequest), err.Error())
			return
		}
		writeJSON(w, http.StatusOK, res)
	}
	mux.HandleFunc("GET /api/query", func(w http.ResponseWriter, r *http.Request) {
		query(w, r, r.URL.Query().Get("q"))
	})
	mux.HandleFunc("POST /api/query", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxQueryBytes+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "read query: "+err.Error())
			return
		}
		if len(body) > MaxQueryBytes {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("query longer than %d bytes", MaxQueryBytes))
			return
		}
		query(w, r, string(body))
	})
	if isFleet(opts.Store) {
		registerNotInFleet(mux)
	} else {
		registerRuns(mux, opts)
		registerTrace(mux, opts)
	}
	registerRequests(mux, opts)
	a := &api{store: opts.Store, d: dialectOf(opts.Store), stackCache: findings.NewStacks()}
	registerAnalysis(mux, a)
	mux.HandleFunc("GET /api/overview", handle(a.overview(opts.Status != nil)))
	mux.HandleFunc("GET /api/vitals", handle(a.vitals))
	mux.HandleFunc("GET /api/samples", handle(a.samples))
	mux.HandleFunc("GET /api/stacks", handle(a.stacks))
	mux.HandleFunc("GET /api/flame", handle(a.flame))
	mux.HandleFunc("GET /api/top", handle(a.top))
	mux.HandleFunc("GET /api/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/yaml")
		w.Write(openAPI)
	})
	mux.HandleFunc("GET /api/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %s (see /api/openapi.yaml)", r.URL.Path))
	})
	mux.Handle("GET /", http.FileServerFS(ui.FS()))
	return s, nil
}

// noRecorder says why a server without a recorder cannot do what needs one.
func noRecorder(opts Options) string {
	if isFleet(opts.Store) {
		return "fleet mode: this server reads the fleet's recordings from ClickHouse and drives no recorder; ask a host's own agent (its --api address)"
	}
	return "no recorder: this server shows a stored recording"
}

// openAPI describes every endpoint; the UI uses nothing else.
//
//go:embed openapi.yaml
var openAPI []byte

// Addr is the bound address.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Serve serves until Shutdown.
func (s *Server) Serve() error {
	if err := s.http.Serve(s.ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Shutdown stops the server, letting requests in flight finish.
func (s *Server) Shutdown(ctx context.Context) error { return s.http.Shutdown(ctx) }

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// tokenCookie carries the token for a browser, which cannot add an
// Authorization header to the page it opens: opening /?token=TOKEN once
// sets it.
const tokenCookie = "holter_token"

func withToken(token string, next http.Handler) http.Handler {
	if token == "" {
		return next
	}
	want := []byte(token)
	matches := func(got string) bool { return subtle.ConstantTimeCompare([]byte(got), want) == 1 }
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if given := r.URL.Query().Get("token"); given != "" && r.Method == http.MethodGet && !strings.HasPrefix(r.URL.Path, "/api/") {
			if !matches(given) {
				writeError(w, http.StatusUnauthorized, "wrong token")
				return
			}
			http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
			http.Redirect(w, r, r.URL.Path, http.StatusSeeOther)
			return
		}
		bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		cookie, _ := r.Cookie(tokenCookie)
		if !matches(bearer) && (cookie == nil || !matches(cookie.Value)) {
			writeError(w, http.StatusUnauthorized, "missing or wrong token (Authorization: Bearer TOKEN, or open the UI once at /?token=TOKEN)")
			return
		}
		next.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// Error is the body of every 4xx/5xx answer.
type Error struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, Error{Error: msg})
}
