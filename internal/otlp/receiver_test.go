package otlp

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/holter-dev/holter/internal/store"
)

func startReceiver(t *testing.T, max int) (*Receiver, *store.Store) {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := Listen(Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Host: "testhost",
		MaxMessageBytes: max, Write: st.WriteSpans})
	if err != nil {
		t.Fatal(err)
	}
	r.Serve()
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	return r, st
}

// sendWithSDK exports one trace (a root with a child that links to another
// span and has an event) through the OpenTelemetry SDK's own exporter.
func sendWithSDK(t *testing.T, exp sdktrace.SpanExporter, service string) trace.SpanContext {
	t.Helper()
	res := resource.NewSchemaless(attribute.String("service.name", service), attribute.Int("process.pid", 4242))
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	tr := tp.Tracer("conformance")
	ctx, root := tr.Start(context.Background(), "GET /item", trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("enduser.id", "alice")))
	other := trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 9}, SpanID: trace.SpanID{7}})
	_, child := tr.Start(ctx, "read", trace.WithLinks(trace.Link{SpanContext: other,
		Attributes: []attribute.KeyValue{attribute.Float64("holter.weight", 2.5)}}),
		trace.WithAttributes(attribute.Int("thread.id", 4243)))
	child.AddEvent("cache miss", trace.WithAttributes(attribute.Int("bytes", 512)))
	child.End()
	root.End()
	if err := tp.Shutdown(context.Background()); err != nil {
		t.Fatalf("%s exporter: %v", service, err)
	}
	return root.SpanContext()
}

func TestSDKExportersSucceed(t *testing.T) {
	r, st := startReceiver(t, 0)
	ctx := context.Background()
	g, err := otlptracegrpc.New(ctx, otlptracegrpc.WithEndpoint(r.GRPCAddr()), otlptracegrpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	h, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	hz, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure(),
		otlptracehttp.WithCompression(otlptracehttp.GzipCompression))
	if err != nil {
		t.Fatal(err)
	}
	for svc, exp := range map[string]sdktrace.SpanExporter{"via-grpc": g, "via-http": h, "via-http-gzip": hz} {
		sc := sendWithSDK(t, exp, svc)
		res, err := st.Query(ctx, fmt.Sprintf(`SELECT s.name, s.parent_span_id IS NULL, s.pid, s.tid, s.client, s.kind, s.host,
			(SELECT count(*) FROM span_links l WHERE l.span_id = s.span_id AND l.weight = 2.5 AND l.linked_trace_id = '09090000000000000000000000000000'),
			(SELECT count(*) FROM span_events e WHERE e.span_id = s.span_id AND e.name = 'cache miss')
			FROM spans s WHERE trace_id = '%s' ORDER BY s.start_ns`, sc.TraceID()))
		if err != nil {
			t.Fatal(err)
		}
		// Acknowledged means committed: the rows are there as soon as the
		// exporter returns.
		got := fmt.Sprint(res.Rows)
		want := "[[GET /item true 4242 <nil> alice server testhost 0 0] [read false 4242 4243 <nil> internal testhost 1 1]]"
		if got != want {
			t.Errorf("%s: stored %s, want %s", svc, got, want)
		}
	}
	if s := r.Stats(); s.SpansAccepted != 6 || s.SpansRejected != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestMalformedPayloadsGetOTLPErrors(t *testing.T) {
	r, _ := startReceiver(t, 64<<10)
	post := func(ctype, encoding string, body []byte) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodPost, "http://"+r.HTTPAddr()+"/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if encoding != "" {
			req.Header.Set("Content-Encoding", encoding)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, b
	}
	big := &coltracepb.ExportTraceServiceRequest{}
	if err := protojson.Unmarshal([]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"`+strings.Repeat("x", 70<<10)+`"}]}]}]}`), big); err != nil {
		t.Fatal(err)
	}
	bigPB, _ := proto.Marshal(big)
	cases := []struct {
		name, ctype, encoding string
		body                  []byte
		code                  int
		rpc                   codes.Code
		msg                   string
	}{
		{"garbage protobuf", contentProtobuf, "", []byte{0xff, 0xff, 0xff}, 400, codes.InvalidArgument, "malformed"},
		{"garbage JSON", contentJSON, "", []byte(`{"resourceSpans": [`), 400, codes.InvalidArgument, "malformed OTLP/JSON"},
		{"JSON with a non-hex trace id", contentJSON, "", []byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"0102030405060708"}]}]}]}`),
			400, codes.InvalidArgument, "$.resourceSpans[0].scopeSpans[0].spans[0].traceId"},
		{"JSON of the wrong shape", contentJSON, "", []byte(`{"resourceSpans":{"a":1}}`), 400, codes.InvalidArgument, "malformed OTLP/JSON"},
		{"unsupported content type", "text/plain", "", []byte("hello"), 415, codes.InvalidArgument, "content type"},
		{"unsupported encoding", contentProtobuf, "br", []byte{}, 415, codes.InvalidArgument, "content encoding"},
		{"bad gzip", contentProtobuf, "gzip", []byte("not gzip"), 400, codes.InvalidArgument, "gzip"},
		{"too large", contentProtobuf, "", bigPB, 413, codes.ResourceExhausted, "larger than 65536 bytes"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			resp, body := post(c.ctype, c.encoding, c.body)
			if resp.StatusCode != c.code {
				t.Fatalf("status %d, want %d: %s", resp.StatusCode, c.code, body)
			}
			st := &spb.Status{}
			if resp.Header.Get("Content-Type") == contentJSON {
				err := protojson.Unmarshal(body, st)
				if err != nil {
					t.Fatalf("body is not a JSON google.rpc.Status: %v: %s", err, body)
				}
			} else if err := proto.Unmarshal(body, st); err != nil {
				t.Fatalf("body is not a google.rpc.Status: %v", err)
			}
			if codes.Code(st.Code) != c.rpc || !strings.Contains(st.Message, c.msg) {
				t.Errorf("status %v %q, want %v containing %q", codes.Code(st.Code), st.Message, c.rpc, c.msg)
			}
		})
	}

	// A span with an all-zero trace id is refused alone; the others stay.
	partial := []byte(`{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"json"}}]},
		"scopeSpans":[{"spans":[
		{"traceId":"00000000000000000000000000000000","spanId":"0102030405060708","name":"bad"},
		{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"good","kind":2,
		 "startTimeUnixNano":"1000","endTimeUnixNano":"2000"}]}]}]}`)
	resp, body := post(contentJSON, "", partial)
	if resp.StatusCode != 200 {
		t.Fatalf("partial: status %d: %s", resp.StatusCode, body)
	}
	out := &coltracepb.ExportTraceServiceResponse{}
	if err := protojson.Unmarshal(body, out); err != nil {
		t.Fatal(err)
	}
	if out.GetPartialSuccess().GetRejectedSpans() != 1 || !strings.Contains(out.GetPartialSuccess().GetErrorMessage(), `span "bad": trace_id`) {
		t.Errorf("partial success %v", out.GetPartialSuccess())
	}

	// gRPC: undecodable is InvalidArgument, oversized ResourceExhausted.
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw := &rawMessage{b: []byte{0xff, 0xff, 0xff}}
	err = conn.Invoke(ctx, "/opentelemetry.proto.collector.trace.v1.TraceService/Export", raw, &rawMessage{}, grpc.ForceCodec(rawCodec{}))
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("garbage over gRPC: %v, want InvalidArgument", err)
	}
	client := coltracepb.NewTraceServiceClient(conn)
	if _, err := client.Export(ctx, big); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("oversized over gRPC: %v, want ResourceExhausted", err)
	}
}

// rawCodec sends bytes as they are, to put a malformed message on the wire.
type rawCodec struct{}

type rawMessage struct{ b []byte }

func (rawCodec) Marshal(v any) ([]byte, error)      { return v.(*rawMessage).b, nil }
func (rawCodec) Unmarshal(data []byte, v any) error { v.(*rawMessage).b = data; return nil }
func (rawCodec) Name() string                       { return "proto" }

// Commits come at most every CommitDelay: an export after a quiet spell
// is committed and acknowledged at once, and exports that come sooner
// wait for the rest of the interval and share one commit.
func TestCommitsAtMostEveryCommitDelay(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	type commit struct {
		at    time.Time
		spans int
	}
	commits := make(chan commit, 8)
	write := func(ctx context.Context, b *store.SpanBatch) error {
		commits <- commit{time.Now(), len(b.Spans)}
		return st.WriteSpans(ctx, b)
	}
	const delay = time.Second
	c := newCommitter(write, delay, 1000, 1000)
	defer c.close()
	n := 0
	batch := func() *store.SpanBatch {
		n++
		return &store.SpanBatch{Spans: []store.Span{{Host: "h", TraceID: fmt.Sprintf("%032x", n), SpanID: fmt.Sprintf("%016x", n),
			Service: "s", Name: "op", StartNs: 1, EndNs: 2}}}
	}

	start := time.Now()
	if err := c.submit(context.Background(), batch()); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > delay/2 {
		t.Errorf("the first export was acknowledged after %v, want at once (CommitDelay %v)", took, delay)
	}
	first := <-commits
	done := make(chan error, 3)
	for range 3 {
		b := batch()
		go func() { done <- c.submit(context.Background(), b) }()
	}
	for range 3 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
	second := <-commits
	if second.spans != 3 {
		t.Errorf("the three exports after the first were committed %d spans at a time, want together", second.spans)
	}
	// The committer times the interval from just before it calls write,
	// and the test's stamps are taken inside: a few ms are its own.
	if gap := second.at.Sub(first.at); gap < delay-10*time.Millisecond {
		t.Errorf("commits %v apart, want at least CommitDelay %v", gap, delay)
	}
	out, err := st.Query(context.Background(), "SELECT count(*) FROM spans")
	if err != nil {
		t.Fatal(err)
	}
	if got := out.Rows[0][0].(int64); got != 4 {
		t.Errorf("%d spans stored, want 4", got)
	}
}
