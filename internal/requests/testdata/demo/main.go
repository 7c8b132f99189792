// Command demo is a small distributed system instrumented with the
// OpenTelemetry SDK, exporting OTLP to holter: client → front → middle →
// storage. Reads burn a known amount of CPU in middle and read from disk
// with O_DIRECT in storage (the thread sleeps on I/O); writes are
// acknowledged by middle once buffered, coalesced into batched writes to
// storage whose span links the original requests (weight = bytes), and
// each leaves an asynchronous index write-back that outlives its request.
//
// Every server handler runs locked to its OS thread and names it in the
// span (thread.id), with process.pid on the resource, so holter can charge
// the span its thread's kernel activity.
//
//	demo storage -addr A -dir D
//	demo middle  -addr A -storage URL [-burn 30ms] [-batch 3]
//	demo front   -addr A -middle URL
//	demo client  -front URL -client NAME -gets N -puts N   (prints a JSON line per request)
//	demo load    -front URL -duration D -concurrency C     (prints requests/s)
//	demo load    -front URL -requests N -concurrency C     (N requests in all)
//	demo sink    -addr A   (an OTLP/gRPC receiver that acknowledges every export and keeps nothing)
//
// OTLP goes to -otlp-grpc or -otlp-http (host:port), whichever is given.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
)

var (
	prop   = propagation.TraceContext{}
	tracer trace.Tracer
)

func main() {
	if len(os.Args) < 2 {
		log.Fatal("usage: demo storage|middle|front|client|load [flags]")
	}
	role := os.Args[1]
	fs := flag.NewFlagSet(role, flag.ExitOnError)
	addr := fs.String("addr", "127.0.0.1:0", "listen address")
	otlpGRPC := fs.String("otlp-grpc", "", "OTLP/gRPC endpoint host:port")
	otlpHTTP := fs.String("otlp-http", "", "OTLP/HTTP endpoint host:port")
	dir := fs.String("dir", os.TempDir(), "storage: data directory")
	storage := fs.String("storage", "", "middle: storage URL")
	middle := fs.String("middle", "", "front: middle URL")
	front := fs.String("front", "", "client: front URL")
	burn := fs.Duration("burn", 30*time.Millisecond, "middle: CPU burnt per read")
	batch := fs.Int("batch", 3, "middle: writes coalesced per batch")
	client := fs.String("client", "alice", "client: client id")
	gets := fs.Int("gets", 0, "client: reads")
	puts := fs.Int("puts", 0, "client: writes")
	duration := fs.Duration("duration", 5*time.Second, "load: how long")
	conc := fs.Int("concurrency", 4, "load: concurrent clients")
	total := fs.Int("requests", 0, "load: send this many requests in all, rather than for -duration")
	// The SDK's own default is 5s (OTEL_BSP_SCHEDULE_DELAY); tests want
	// their spans sooner.
	batchTimeout := fs.Duration("batch-timeout", 100*time.Millisecond, "longest a span waits to be exported")
	fs.Parse(os.Args[2:])

	shutdown := setupTracing(role, *otlpGRPC, *otlpHTTP, *batchTimeout)
	defer shutdown()
	switch role {
	case "storage":
		serve(*addr, newStorage(*dir).routes())
	case "middle":
		serve(*addr, newMiddle(*storage, *burn, *batch).routes())
	case "front":
		serve(*addr, frontRoutes(*middle))
	case "client":
		runClient(*front, *client, *gets, *puts)
	case "load":
		runLoad(*front, *duration, *total, *conc)
	case "sink":
		serveSink(*addr)
	default:
		log.Fatalf("unknown role %q", role)
	}
}

func setupTracing(service, grpcEndpoint, httpEndpoint string, batchTimeout time.Duration) func() {
	ctx := context.Background()
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.Int("process.pid", os.Getpid()))
	var opts []sdktrace.TracerProviderOption
	opts = append(opts, sdktrace.WithResource(res))
	var exp sdktrace.SpanExporter
	var err error
	switch {
	case grpcEndpoint != "":
		exp, err = otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(grpcEndpoint), otlptracegrpc.WithInsecure())
	case httpEndpoint != "":
		exp, err = otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(httpEndpoint), otlptracehttp.WithInsecure())
	}
	if err != nil {
		log.Fatal(err)
	}
	if exp != nil {
		opts = append(opts, sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(batchTimeout)))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	tracer = tp.Tracer("holter-demo")
	return func() { tp.Shutdown(ctx) }
}

// traceSink acknowledges every OTLP export and keeps nothing: a backend
// that costs the exporting services what any collector's would, so that
// bench/tracing-overhead.sh can tell what holter adds to the cost of the
// services' instrumentation itself.
type traceSink struct {
	coltracepb.UnimplementedTraceServiceServer
}

func (traceSink) Export(context.Context, *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// serveSink listens for OTLP/gRPC, prints the bound address on stdout,
// and serves a traceSink.
func serveSink(addr string) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening grpc://%s\n", ln.Addr())
	os.Stdout.Sync()
	srv := grpc.NewServer()
	coltracepb.RegisterTraceServiceServer(srv, traceSink{})
	log.Fatal(srv.Serve(ln))
}

// serve listens, prints the bound address on stdout, and serves.
func serve(addr string, h http.Handler) {
	srv := &http.Server{Addr: addr, Handler: h}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("listening http://%s\n", ln.Addr())
	os.Stdout.Sync()
	log.Fatal(srv.Serve(ln))
}

// handle runs h locked to its OS thread inside a server span that names
// the thread, so the kernel's accounting of that thread is the span's.
func handle(name string, h func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		ctx := prop.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.Int("thread.id", unix.Gettid())))
		defer span.End()
		// What the thread ran during the span by its own clock: the burn,
		// and the rest of the handler (the call to storage, the runtime's
		// allocation assists to the garbage collector), which on a loaded
		// machine adds a few milliseconds now and then.
		c0 := threadCPU()
		h(ctx, span, w, r)
		span.SetAttributes(attribute.Int64("demo.thread_cpu_ns", int64(threadCPU()-c0)))
	}
}

// call makes an HTTP request inside a client span, propagating the context.
func call(ctx context.Context, name, method, url string, body []byte) ([]byte, error) {
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient))
	defer span.End()
	req, err := http.NewRequestWithContext(ctx, method, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	prop.Inject(ctx, propagation.HeaderCarrier(req.Header))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		return nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		span.SetStatus(codes.Error, resp.Status)
		return out, fmt.Errorf("%s %s: %s: %s", method, url, resp.Status, out)
	}
	return out, err
}

func threadCPU() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}

// --- storage ---

type storage struct {
	data    string
	log     *os.File
	mu      sync.Mutex
	readBuf []byte
}

const (
	readSize = 64 << 10
	dataSize = 8 << 20
)

func newStorage(dir string) *storage {
	s := &storage{data: filepath.Join(dir, "demo-data")}
	if err := os.WriteFile(s.data, make([]byte, dataSize), 0o600); err != nil {
		log.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "demo-log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		log.Fatal(err)
	}
	s.log = f
	f.Sync()
	return s
}

// alignedBuffer is memory O_DIRECT can read into.
func alignedBuffer(n int) []byte {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func (s *storage) routes() http.Handler {
	mux := http.NewServeMux()
	var n atomic.Int64
	// A read misses every cache: O_DIRECT, so the thread sleeps on the disk.
	mux.HandleFunc("GET /read", handle("storage read", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		fd, err := unix.Open(s.data, unix.O_RDONLY|unix.O_DIRECT, 0)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		defer unix.Close(fd)
		buf := alignedBuffer(readSize)
		defer unix.Munmap(buf)
		off := (n.Add(1) * readSize * 7) % (dataSize - readSize)
		got, err := unix.Pread(fd, buf, off-off%4096)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		span.SetAttributes(attribute.Int("demo.read_bytes", got))
		w.Write([]byte(strconv.Itoa(got)))
	}))
	// A batched write: appended and made durable.
	mux.HandleFunc("POST /write", handle("storage write", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		s.mu.Lock()
		defer s.mu.Unlock()
		s.log.Write(body)
		s.log.Sync()
		span.SetAttributes(attribute.Int("demo.bytes", len(body)))
	}))
	mux.HandleFunc("POST /index", handle("storage index", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
	}))
	return mux
}

// --- middle ---

type middle struct {
	storage string
	burn    time.Duration
	batch   int

	mu      sync.Mutex
	pending []pendingWrite
	flushes chan []pendingWrite
}

type pendingWrite struct {
	sc   trace.SpanContext
	data []byte
}

func newMiddle(storage string, burn time.Duration, batch int) *middle {
	m := &middle{storage: storage, burn: burn, batch: batch, flushes: make(chan []pendingWrite, 64)}
	go m.flusher()
	return m
}

func (m *middle) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /get", handle("middle get", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		// The thread's CPU clock is a system call (no vDSO): read every
		// 100000 steps (some 0.2 ms) as a computation checking a budget
		// would, not every few microseconds.
		c0 := threadCPU()
		x := 1.0
		for threadCPU()-c0 < m.burn {
			for i := 0; i < 100000; i++ {
				x = x*1.0000001 + 1e-9
			}
		}
		span.SetAttributes(attribute.Int64("demo.burn_cpu_ns", int64(threadCPU()-c0)), attribute.Float64("demo.x", x))
		out, err := call(ctx, "call storage read", http.MethodGet, m.storage+"/read", nil)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		w.Write(out)
	}))
	mux.HandleFunc("PUT /put", handle("middle put", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		// Buffered: the client is answered now, the data is written later
		// in a batch with other clients' writes.
		m.mu.Lock()
		m.pending = append(m.pending, pendingWrite{sc: span.SpanContext(), data: body})
		if len(m.pending) >= m.batch {
			m.flushes <- m.pending
			m.pending = nil
		}
		m.mu.Unlock()
		// The index is written back asynchronously, after the answer.
		later := context.WithoutCancel(ctx)
		go func() {
			time.Sleep(20 * time.Millisecond)
			call(later, "index write-back", http.MethodPost, m.storage+"/index", []byte("k"))
		}()
		w.Write([]byte("ok"))
	}))
	return mux
}

// flusher writes each batch in one request whose span links the writes it
// coalesces, weighted by their bytes.
func (m *middle) flusher() {
	for b := range m.flushes {
		var links []trace.Link
		var data []byte
		for _, p := range b {
			links = append(links, trace.Link{SpanContext: p.sc,
				Attributes: []attribute.KeyValue{attribute.Int("holter.weight", len(p.data))}})
			data = append(data, p.data...)
		}
		func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx, span := tracer.Start(context.Background(), "middle flush", trace.WithLinks(links...),
				trace.WithAttributes(attribute.Int("thread.id", unix.Gettid()), attribute.Int("demo.writes", len(b))))
			defer span.End()
			if _, err := call(ctx, "call storage write", http.MethodPost, m.storage+"/write", data); err != nil {
				span.SetStatus(codes.Error, err.Error())
			}
		}()
	}
}

// --- front ---

func frontRoutes(middle string) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /item", handle("GET /item", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		out, err := call(ctx, "call middle get", http.MethodGet, middle+"/get", nil)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		w.Write(out)
	}))
	mux.HandleFunc("PUT /item", handle("PUT /item", func(ctx context.Context, span trace.Span, w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		out, err := call(ctx, "call middle put", http.MethodPut, middle+"/put", body)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		w.Write(out)
	}))
	return mux
}

// --- client ---

type result struct {
	Op      string `json:"op"`
	TraceID string `json:"trace_id"`
	Client  string `json:"client"`
	Bytes   int    `json:"bytes"`
	Error   string `json:"error,omitempty"`
}

func request(ctx context.Context, front, client, op string, size int) result {
	ctx, span := tracer.Start(ctx, "client "+op, trace.WithSpanKind(trace.SpanKindClient),
		trace.WithAttributes(attribute.String("enduser.id", client)))
	defer span.End()
	method, body := http.MethodGet, []byte(nil)
	if op == "put" {
		method, body = http.MethodPut, bytes.Repeat([]byte("x"), size)
	}
	res := result{Op: op, TraceID: span.SpanContext().TraceID().String(), Client: client, Bytes: size}
	if _, err := call(ctx, "call front", method, front+"/item", body); err != nil {
		span.SetStatus(codes.Error, err.Error())
		res.Error = err.Error()
	}
	return res
}

func runClient(front, client string, gets, puts int) {
	enc := json.NewEncoder(os.Stdout)
	for i := 0; i < gets; i++ {
		enc.Encode(request(context.Background(), front, client, "get", 0))
	}
	for i := 0; i < puts; i++ {
		enc.Encode(request(context.Background(), front, client, "put", 1000*(i%3+1)))
	}
}

// runLoad sends reads and writes from concurrent clients, for d or, when
// total > 0, until total requests are done, and prints the throughput.
func runLoad(front string, d time.Duration, total, conc int) {
	var done, next, errs atomic.Int64
	began := time.Now()
	stop := began.Add(d)
	more := func() bool {
		if total > 0 {
			return next.Add(1) <= int64(total)
		}
		return time.Now().Before(stop)
	}
	var wg sync.WaitGroup
	for c := 0; c < conc; c++ {
		wg.Add(1)
		go func(c int) {
			defer wg.Done()
			for i := 0; more(); i++ {
				op := "get"
				if i%2 == 1 {
					op = "put"
				}
				if r := request(context.Background(), front, fmt.Sprintf("load%d", c), op, 1000); r.Error != "" {
					errs.Add(1)
				}
				done.Add(1)
			}
		}(c)
	}
	wg.Wait()
	took := time.Since(began)
	fmt.Printf(`{"requests": %d, "errors": %d, "seconds": %.3f, "per_second": %.1f}`+"\n", done.Load(), errs.Load(),
		took.Seconds(), float64(done.Load())/took.Seconds())
}
