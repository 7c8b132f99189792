package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	_ "google.golang.org/grpc/encoding/gzip" // OTLP exporters may compress
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/holter-dev/holter/internal/store"
)

// Defaults of Options.
const (
	DefaultGRPCAddr = "127.0.0.1:4317"
	DefaultHTTPAddr = "127.0.0.1:4318"
	// DefaultMaxMessageBytes bounds one export request, compressed or not
	// (gRPC's own default receive limit).
	DefaultMaxMessageBytes = 4 << 20
	DefaultCommitDelay     = 20 * time.Millisecond
	DefaultCommitSpans     = 8192
	DefaultMaxQueuedSpans  = 200_000
	// DefaultReadTimeout bounds how long an HTTP request, headers and
	// body, may take to arrive: at loopback speed the largest takes
	// milliseconds, so only a client that holds a connection open by
	// sending slowly waits this long.
	DefaultReadTimeout = 30 * time.Second
	// DefaultMaxConnections bounds the connections each endpoint holds at
	// once; an exporter keeps one or a few.
	DefaultMaxConnections = 256
)

// Options configures a Receiver; zero fields take the defaults. An empty
// address with its Disable flag set turns that endpoint off.
type Options struct {
	GRPCAddr, HTTPAddr       string
	DisableGRPC, DisableHTTP bool
	MaxMessageBytes          int
	// CommitDelay is the least time between two commits: spans that come
	// sooner after the last one wait for the rest of it, with the other
	// exporters' spans that join them; CommitSpans commits at once when
	// that many wait.
	CommitDelay time.Duration
	CommitSpans int
	// MaxQueuedSpans bounds the spans waiting for a commit; beyond it
	// exporters are told to retry (gRPC Unavailable, HTTP 503).
	MaxQueuedSpans int
	// ReadTimeout bounds the arrival of an HTTP request, and an idle gRPC
	// connection's life; MaxConnections the connections of each endpoint:
	// one over it is answered 503 with Retry-After (HTTP) or closed (gRPC).
	ReadTimeout    time.Duration
	MaxConnections int
	// Host names spans whose resource has no host.name: the receiver
	// listens on loopback by default, so they come from this host.
	Host string
	// Write commits spans durably; *store.Store's WriteSpans.
	Write func(context.Context, *store.SpanBatch) error
	// OnProcesses is told the local processes whose spans were committed
	// (their process.pid), so their threads can be accounted.
	OnProcesses func(pids []uint32)
	// OnThreads is told the local threads (pid, thread.id) that spans
	// name, before they are committed.
	OnThreads func(threads [][2]uint32)
	// OnCommitted is given each batch of spans once it is committed,
	// before the exporter is told; it must not keep the batch's slices.
	OnCommitted func(*store.SpanBatch)
	Logf        func(format string, args ...any)
}

// Receiver is a running OTLP trace receiver.
type Receiver struct {
	opts     Options
	commit   *committer
	grpc     *grpc.Server
	grpcLn   *connLimiter
	http     *http.Server
	httpLn   *connLimiter
	wg       sync.WaitGroup
	mu       sync.Mutex
	rejected uint64
	requests uint64
	// unattributed counts spans without thread.id or process.pid; last
	// is the latest; senders caches the process behind each client
	// address, looked up once a connection.
	unattributed uint64
	last         *Unattributed
	senders      map[string]*Sender
}

// Listen binds the enabled endpoints; Serve starts answering.
func Listen(opts Options) (*Receiver, error) {
	if opts.Write == nil {
		return nil, errors.New("otlp receiver: no store to write to")
	}
	if opts.GRPCAddr == "" {
		opts.GRPCAddr = DefaultGRPCAddr
	}
	if opts.HTTPAddr == "" {
		opts.HTTPAddr = DefaultHTTPAddr
	}
	if opts.MaxMessageBytes <= 0 {
		opts.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if opts.CommitDelay <= 0 {
		opts.CommitDelay = DefaultCommitDelay
	}
	if opts.CommitSpans <= 0 {
		opts.CommitSpans = DefaultCommitSpans
	}
	if opts.MaxQueuedSpans <= 0 {
		opts.MaxQueuedSpans = DefaultMaxQueuedSpans
	}
	if opts.Logf == nil {
		opts.Logf = func(string, ...any) {}
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	if opts.MaxConnections <= 0 {
		opts.MaxConnections = DefaultMaxConnections
	}
	r := &Receiver{opts: opts}
	if !opts.DisableGRPC {
		ln, err := net.Listen("tcp", opts.GRPCAddr)
		if err != nil {
			return nil, fmt.Errorf("otlp grpc listen on %s: %w", opts.GRPCAddr, err)
		}
		r.grpcLn = limitConnections(ln, opts.MaxConnections, nil)
		r.grpc = grpc.NewServer(grpc.MaxRecvMsgSize(opts.MaxMessageBytes), grpc.ForceServerCodec(lateCodec{}),
			grpc.ConnectionTimeout(opts.ReadTimeout),
			grpc.MaxConcurrentStreams(maxStreams),
			// Idle connections are closed, and clients that ping more
			// often than exporters need to are cut off.
			grpc.KeepaliveParams(keepalive.ServerParameters{MaxConnectionIdle: 4 * opts.ReadTimeout, Time: 2 * opts.ReadTimeout, Timeout: opts.ReadTimeout}),
			grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}))
		r.grpc.RegisterService(&traceServiceDesc, r)
	}
	if !opts.DisableHTTP {
		ln, err := net.Listen("tcp", opts.HTTPAddr)
		if err != nil {
			if r.grpcLn != nil {
				r.grpcLn.Close()
			}
			return nil, fmt.Errorf("otlp http listen on %s: %w", opts.HTTPAddr, err)
		}
		r.httpLn = limitConnections(ln, opts.MaxConnections, refuseHTTP)
		mux := http.NewServeMux()
		mux.HandleFunc("/v1/traces", r.serveHTTP)
		r.http = &http.Server{Handler: mux, ReadHeaderTimeout: min(10*time.Second, opts.ReadTimeout),
			ReadTimeout: opts.ReadTimeout, IdleTimeout: 4 * opts.ReadTimeout, MaxHeaderBytes: maxHeaderBytes,
			// A response waits for its spans' commit: that long, and the
			// writing, and the exporter retries.
			WriteTimeout: opts.ReadTimeout + time.Minute}
	}
	r.commit = newCommitter(opts.Write, opts.CommitDelay, opts.CommitSpans, opts.MaxQueuedSpans)
	return r, nil
}

// GRPCAddr and HTTPAddr are the bound addresses ("" when disabled).
func (r *Receiver) GRPCAddr() string { return addrOf(r.grpcLn) }
func (r *Receiver) HTTPAddr() string { return addrOf(r.httpLn) }

func addrOf(ln *connLimiter) string {
	if ln == nil {
		return ""
	}
	return ln.Addr().String()
}

// maxStreams bounds the concurrent exports of one gRPC connection, and
// maxHeaderBytes an HTTP request's headers.
const (
	maxStreams     = 64
	maxHeaderBytes = 64 << 10
)

// Serve answers on the bound endpoints until Shutdown.
func (r *Receiver) Serve() {
	if r.grpc != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.grpc.Serve(r.grpcLn); err != nil {
				r.opts.Logf("otlp grpc: %v", err)
			}
		}()
	}
	if r.http != nil {
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			if err := r.http.Serve(r.httpLn); !errors.Is(err, http.ErrServerClosed) {
				r.opts.Logf("otlp http: %v", err)
			}
		}()
	}
}

// Shutdown stops accepting, lets requests in flight commit, and returns.
func (r *Receiver) Shutdown(ctx context.Context) {
	if r.http != nil {
		r.http.Shutdown(ctx)
	}
	if r.grpc != nil {
		stopped := make(chan struct{})
		go func() { r.grpc.GracefulStop(); close(stopped) }()
		select {
		case <-stopped:
		case <-ctx.Done():
			r.grpc.Stop()
		}
	}
	r.wg.Wait()
	r.commit.close()
}

// Stats reports what the receiver did.
func (r *Receiver) Stats() Stats {
	s := r.commit.snapshot()
	r.mu.Lock()
	s.Requests, s.SpansRejected = r.requests, r.rejected
	s.SpansUnattributed, s.LastUnattributed = r.unattributed, r.last
	r.mu.Unlock()
	for _, ln := range []*connLimiter{r.grpcLn, r.httpLn} {
		if ln != nil {
			s.ConnectionsRefused += ln.refused.Load()
		}
	}
	return s
}

// export stores one request's spans, received from the client address
// from, and says what was rejected.
func (r *Receiver) export(ctx context.Context, req *coltracepb.ExportTraceServiceRequest, from string) (*coltracepb.ExportTraceServiceResponse, error) {
	c := convert(req, r.opts.Host, time.Now().UnixNano())
	r.mu.Lock()
	r.requests++
	r.rejected += uint64(c.rejected)
	r.mu.Unlock()
	r.countUnattributed(c, from)
	if len(c.batch.Spans) > 0 {
		// Before the commit: the accounting keeps what the threads did
		// before their first span in store by the time the spans are.
		if r.opts.OnThreads != nil {
			seen := map[[2]uint32]bool{}
			var threads [][2]uint32
			for i := range c.batch.Spans {
				sp := &c.batch.Spans[i]
				k := [2]uint32{sp.Pid, sp.Tid}
				if sp.Tid != 0 && c.pids[sp.Pid] && !seen[k] {
					seen[k] = true
					threads = append(threads, k)
				}
			}
			if len(threads) > 0 {
				r.opts.OnThreads(threads)
			}
		}
		if err := r.commit.submit(ctx, &c.batch); err != nil {
			return nil, err
		}
		if r.opts.OnCommitted != nil {
			r.opts.OnCommitted(&c.batch)
		}
		if r.opts.OnProcesses != nil && len(c.pids) > 0 {
			pids := make([]uint32, 0, len(c.pids))
			for p := range c.pids {
				pids = append(pids, p)
			}
			r.opts.OnProcesses(pids)
		}
	}
	resp := &coltracepb.ExportTraceServiceResponse{}
	if c.rejected > 0 {
		resp.PartialSuccess = &coltracepb.ExportTracePartialSuccess{RejectedSpans: c.rejected, ErrorMessage: c.summary()}
	}
	return resp, nil
}

// countUnattributed counts c's local spans that lack thread.id or
// process.pid, and names the process that sent the last of them.
func (r *Receiver) countUnattributed(c *converted, from string) {
	var n uint64
	var last *store.Span
	for i := range c.batch.Spans {
		sp := &c.batch.Spans[i]
		if (sp.Pid == 0 || sp.Tid == 0) && sp.Host == r.opts.Host {
			n++
			last = sp
		}
	}
	if n == 0 {
		return
	}
	u := &Unattributed{Service: last.Service, Missing: "thread.id"}
	if last.Pid == 0 {
		u.Missing = "process.pid and thread.id"
		if last.Tid != 0 {
			u.Missing = "process.pid"
		}
	}
	r.mu.Lock()
	sender, known := r.senders[from]
	r.mu.Unlock()
	if !known && from != "" {
		// Looked up outside the lock: it reads every process's fds.
		if s, err := senderOf(from); err == nil {
			sender = &s
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.senders == nil || len(r.senders) > 1024 {
		r.senders = map[string]*Sender{}
	}
	r.senders[from] = sender
	u.Sender = sender
	r.unattributed += n
	r.last = u
}

// traceServiceDesc is OTLP's TraceService with a handler of our own, so a
// request that does not decode is InvalidArgument (gRPC would say
// Internal) and commit failures map to OTLP's retryable codes.
var traceServiceDesc = grpc.ServiceDesc{
	ServiceName: "opentelemetry.proto.collector.trace.v1.TraceService",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Export",
		Handler: func(srv any, ctx context.Context, dec func(any) error, _ grpc.UnaryServerInterceptor) (any, error) {
			raw := &undecoded{}
			if err := dec(raw); err != nil {
				return nil, err
			}
			req := &coltracepb.ExportTraceServiceRequest{}
			if err := proto.Unmarshal(raw.b, req); err != nil {
				return nil, status.Errorf(codes.InvalidArgument, "malformed ExportTraceServiceRequest: %v", err)
			}
			from := ""
			if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
				from = p.Addr.String()
			}
			resp, err := srv.(*Receiver).export(ctx, req, from)
			if err != nil {
				return nil, grpcStatus(err)
			}
			return resp, nil
		},
	}},
	Metadata: "opentelemetry/proto/collector/trace/v1/trace_service.proto",
}

// lateCodec leaves decoding a request to the handler: when gRPC's own
// codec fails it answers Internal before any handler runs, where OTLP asks
// for InvalidArgument.
type lateCodec struct{}

type undecoded struct{ b []byte }

func (lateCodec) Marshal(v any) ([]byte, error) { return proto.Marshal(v.(proto.Message)) }
func (lateCodec) Name() string                  { return "proto" }
func (lateCodec) Unmarshal(data []byte, v any) error {
	u, ok := v.(*undecoded)
	if !ok {
		return fmt.Errorf("unexpected message type %T", v)
	}
	u.b = bytes.Clone(data)
	return nil
}

func grpcStatus(err error) error {
	switch {
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return status.FromContextError(err).Err()
	default: // overloaded, shutting down, or the commit failed: retry later
		return status.Errorf(codes.Unavailable, "spans not stored, retry: %v", err)
	}
}

// OTLP/HTTP content types.
const (
	contentProtobuf = "application/x-protobuf"
	contentJSON     = "application/json"
)

func (r *Receiver) serveHTTP(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeStatus(w, contentProtobuf, http.StatusMethodNotAllowed, codes.Unimplemented, "OTLP/HTTP takes POST")
		return
	}
	ctype, _, _ := mime.ParseMediaType(req.Header.Get("Content-Type"))
	if ctype != contentProtobuf && ctype != contentJSON {
		writeStatus(w, contentProtobuf, http.StatusUnsupportedMediaType, codes.InvalidArgument,
			fmt.Sprintf("content type %q: OTLP/HTTP takes %s or %s", req.Header.Get("Content-Type"), contentProtobuf, contentJSON))
		return
	}
	limit := int64(r.opts.MaxMessageBytes)
	body, err := readLimited(req.Body, limit)
	if err == nil {
		switch enc := strings.ToLower(req.Header.Get("Content-Encoding")); enc {
		case "", "identity":
		case "gzip":
			var zr *gzip.Reader
			if zr, err = gzip.NewReader(bytes.NewReader(body)); err == nil {
				body, err = readLimited(zr, limit)
			} else {
				err = fmt.Errorf("%w: gzip: %v", errMalformed, err)
			}
		default:
			writeStatus(w, ctype, http.StatusUnsupportedMediaType, codes.InvalidArgument, fmt.Sprintf("content encoding %q: takes gzip or none", enc))
			return
		}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		writeStatus(w, ctype, http.StatusRequestTimeout, codes.DeadlineExceeded,
			fmt.Sprintf("request body not received within %v", r.opts.ReadTimeout))
		return
	}
	if errors.Is(err, errTooLarge) {
		writeStatus(w, ctype, http.StatusRequestEntityTooLarge, codes.ResourceExhausted,
			fmt.Sprintf("request larger than %d bytes", limit))
		return
	}
	if err != nil {
		writeStatus(w, ctype, http.StatusBadRequest, codes.InvalidArgument, "read request: "+err.Error())
		return
	}
	msg := &coltracepb.ExportTraceServiceRequest{}
	if ctype == contentJSON {
		err = decodeJSON(body, msg)
	} else if err = proto.Unmarshal(body, msg); err != nil {
		err = fmt.Errorf("malformed ExportTraceServiceRequest: %v", err)
	}
	if err != nil {
		writeStatus(w, ctype, http.StatusBadRequest, codes.InvalidArgument, err.Error())
		return
	}
	resp, err := r.export(req.Context(), msg, req.RemoteAddr)
	if err != nil {
		w.Header().Set("Retry-After", "1")
		writeStatus(w, ctype, http.StatusServiceUnavailable, codes.Unavailable, "spans not stored, retry: "+err.Error())
		return
	}
	var out []byte
	if ctype == contentJSON {
		out, err = protojson.Marshal(resp)
	} else {
		out, err = proto.Marshal(resp)
	}
	if err != nil {
		writeStatus(w, ctype, http.StatusInternalServerError, codes.Internal, err.Error())
		return
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(http.StatusOK)
	w.Write(out)
}

var (
	errTooLarge  = errors.New("too large")
	errMalformed = errors.New("malformed")
)

func readLimited(rd io.Reader, limit int64) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(rd, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, errTooLarge
	}
	return b, nil
}

// decodeJSON reads OTLP/JSON: protobuf's JSON mapping, except that trace
// and span ids are hex.
func decodeJSON(body []byte, msg *coltracepb.ExportTraceServiceRequest) error {
	var generic any
	if err := json.Unmarshal(body, &generic); err != nil {
		return fmt.Errorf("malformed OTLP/JSON: %v", err)
	}
	if _, ok := generic.(map[string]any); !ok {
		return errors.New("malformed OTLP/JSON: the request must be an object")
	}
	if err := hexIDsToBase64(generic, "$"); err != nil {
		return fmt.Errorf("malformed OTLP/JSON: %v", err)
	}
	fixed, err := json.Marshal(generic)
	if err != nil {
		return fmt.Errorf("malformed OTLP/JSON: %v", err)
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(fixed, msg); err != nil {
		return fmt.Errorf("malformed OTLP/JSON: %v", err)
	}
	return nil
}

// writeStatus answers with a google.rpc.Status body in the request's
// encoding, as OTLP/HTTP requires of failures.
func writeStatus(w http.ResponseWriter, ctype string, httpCode int, code codes.Code, msg string) {
	st := &spb.Status{Code: int32(code), Message: msg}
	var body []byte
	if ctype == contentJSON {
		body, _ = protojson.Marshal(st)
	} else {
		ctype = contentProtobuf
		body, _ = proto.Marshal(st)
	}
	w.Header().Set("Content-Type", ctype)
	w.WriteHeader(httpCode)
	w.Write(body)
}
