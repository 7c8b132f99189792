package server

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/holter-dev/holter/internal/access"
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
	// Addr is the HTTP address, host:port; "" serves no HTTP. See
	// CheckAddr for which addresses a command may listen on.
	Addr string
	// Token is the admin's: it gives the root role over HTTP. Required
	// with Addr.
	Token string
	// ReadToken, when set, gives the reader role over HTTP.
	ReadToken string
	// Hosts are the names, beyond the loopback ones, a request's Host
	// header may carry.
	Hosts []string
	// Sockets are Unix sockets to serve on, each caller's role read from
	// its peer credentials against Groups.
	Sockets []Socket
	Groups  access.Groups
	// MaxTraces and MaxTraceBytes bound the live traces running at once,
	// and their maps' memory together (0: DefaultMaxTraces,
	// DefaultMaxTraceBytes).
	MaxTraces     int
	MaxTraceBytes uint64
	Store         Querier
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
	ln   net.Listener   // HTTP; nil without Addr
	lns  []net.Listener // ln and the sockets
}

// MaxQueryBytes bounds a query's text.
const MaxQueryBytes = 1 << 20

// CheckAddr checks an HTTP address before anything is loaded: a
// non-loopback one needs a token the operator chose (tokenGiven), as one
// made at start is only for this host's users.
func CheckAddr(addr string, tokenGiven bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("api address %q: %w", addr, err)
	}
	if !isLoopback(host) && !tokenGiven {
		return fmt.Errorf("api address %q is not loopback: give a token (--token-file FILE or $HOLTER_TOKEN) to listen there", addr)
	}
	return nil
}

// Listen binds the HTTP address and the sockets.
func Listen(opts Options) (*Server, error) {
	mux := http.NewServeMux()
	g := &guard{next: mux}
	for _, t := range []roleToken{{[]byte(opts.Token), access.Root}, {[]byte(opts.ReadToken), access.Reader}} {
		if len(t.value) > 0 {
			g.tokens = append(g.tokens, t)
		}
	}
	s := &Server{http: &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second, ConnContext: connContext}}
	fail := func(err error) (*Server, error) {
		for _, ln := range s.lns {
			ln.Close()
		}
		return nil, err
	}
	if opts.Addr != "" {
		if opts.Token == "" {
			return nil, fmt.Errorf("api address %s: no token", opts.Addr)
		}
		ln, err := net.Listen("tcp", opts.Addr)
		if err != nil {
			return nil, fmt.Errorf("api listen on %s: %w", opts.Addr, err)
		}
		s.ln = ln
		s.lns = append(s.lns, ln)
		host, port, _ := net.SplitHostPort(ln.Addr().String())
		g.hosts = newHostPolicy(host, opts.Hosts)
		// Cookies do not tell ports apart: two servers on one host each
		// keep their own.
		g.cookieName = tokenCookie + "_" + port
	}
	for _, sock := range opts.Sockets {
		ln, err := listenSocket(sock, opts.Groups)
		if err != nil {
			return fail(err)
		}
		s.lns = append(s.lns, ln)
	}
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
	registerQuery(mux, opts)
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
	mux.HandleFunc("GET /api/flame", a.flameExport)
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

// Addr is the bound HTTP address, "" without one.
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// LoginURL is the address of the UI that logs a browser in with token.
func LoginURL(addr, token string) string {
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip := net.ParseIP(host); ip != nil && ip.IsUnspecified() {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
	}
	return "http://" + addr + "/?" + url.Values{"token": {token}}.Encode()
}

// Serve serves on every listener until Shutdown.
func (s *Server) Serve() error {
	errs := make(chan error, len(s.lns))
	for _, ln := range s.lns {
		go func() { errs <- s.http.Serve(ln) }()
	}
	var first error
	for range s.lns {
		if err := <-errs; first == nil && !errors.Is(err, http.ErrServerClosed) {
			first = err
		}
	}
	return first
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
// Authorization header to the page it opens: opening the login URL once
// (LoginURL) sets it.
const tokenCookie = "holter_token"

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
