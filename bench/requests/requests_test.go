// Package requests_test benchmarks request tracing: OTLP ingest into the
// store (spans per second per core of the receiver's CPU) and causal path
// reconstruction (time and SQL queries per path, Stardust Table 4).
//
//	go test -run '^$' -bench . ./bench/requests/
package requests_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	resourcepb "go.opentelemetry.io/proto/otlp/resource/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/holter-dev/holter/internal/otlp"
	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
)

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// request builds an export of n spans: traces of 8 spans, each with
// attributes, one event and (every 8th) a link.
func request(seq, n int) *coltracepb.ExportTraceServiceRequest {
	var spans []*tracepb.Span
	for i := 0; i < n; i++ {
		tr := make([]byte, 16)
		copy(tr, fmt.Sprintf("%08d%08d", seq, i/8))
		id := []byte(fmt.Sprintf("%08d", i+1))
		var parent []byte
		if i%8 != 0 {
			parent = []byte(fmt.Sprintf("%08d", i))
		}
		s := &tracepb.Span{TraceId: tr, SpanId: id, ParentSpanId: parent, Name: "op", Kind: tracepb.Span_SPAN_KIND_SERVER,
			StartTimeUnixNano: uint64(1e18 + i*1000), EndTimeUnixNano: uint64(1e18 + i*1000 + 500),
			Attributes: []*commonpb.KeyValue{
				{Key: "thread.id", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_IntValue{IntValue: 77}}},
				{Key: "http.route", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "/item/{id}"}}}},
			Events: []*tracepb.Span_Event{{TimeUnixNano: uint64(1e18 + i*1000 + 100), Name: "cache miss"}}}
		if i%8 == 7 {
			s.Links = []*tracepb.Span_Link{{TraceId: tr, SpanId: []byte("00000001")}}
		}
		spans = append(spans, s)
	}
	return &coltracepb.ExportTraceServiceRequest{ResourceSpans: []*tracepb.ResourceSpans{{
		Resource: &resourcepb.Resource{Attributes: []*commonpb.KeyValue{
			{Key: "service.name", Value: &commonpb.AnyValue{Value: &commonpb.AnyValue_StringValue{StringValue: "bench"}}}}},
		ScopeSpans: []*tracepb.ScopeSpans{{Spans: spans}}}}}
}

// BenchmarkIngest sends exports of 512 spans over OTLP/gRPC from 4
// concurrent exporters; each is acknowledged after its commit.
func BenchmarkIngest(b *testing.B) {
	st := storetest.Open(b)
	r, err := otlp.Listen(otlp.Options{GRPCAddr: "127.0.0.1:0", DisableHTTP: true, Host: "h", Write: st.WriteSpans})
	if err != nil {
		b.Fatal(err)
	}
	r.Serve()
	defer r.Shutdown(context.Background())
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := coltracepb.NewTraceServiceClient(conn)
	const per = 512
	reqs := make([]*coltracepb.ExportTraceServiceRequest, 64)
	for i := range reqs {
		reqs[i] = request(i, per)
	}
	b.SetParallelism(1)
	cpu0, t0 := cpuTime(), time.Now()
	b.ResetTimer()
	var seq atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := seq.Add(1)
			if _, err := client.Export(context.Background(), reqs[i%int64(len(reqs))]); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	spans := float64(b.N * per)
	wall, cpu := time.Since(t0).Seconds(), (cpuTime() - cpu0).Seconds()
	b.ReportMetric(spans/wall, "spans/s")
	// The whole process's CPU: receiver, DuckDB and the exporters.
	b.ReportMetric(spans/cpu, "spans/cpu-s")
}

// BenchmarkPath reconstructs the causal path of a request coalesced into a
// batch, in a store holding 2000 requests.
func BenchmarkPath(b *testing.B) {
	st := storetest.Open(b)
	ctx := context.Background()
	const traces = 2000
	batch := &store.SpanBatch{}
	var acct []store.SpanAccounting
	for t := 0; t < traces; t++ {
		tr := fmt.Sprintf("%032x", t+1)
		for s := 0; s < 7; s++ {
			parent := ""
			if s > 0 {
				parent = fmt.Sprintf("%016x", s)
			}
			batch.Spans = append(batch.Spans, store.Span{Host: "h", TraceID: tr, SpanID: fmt.Sprintf("%016x", s+1), ParentSpanID: parent,
				Service: fmt.Sprintf("svc%d", s/2), Name: "op", Kind: "server", StartNs: int64(t*1e6 + s*10), EndNs: int64(t*1e6 + 1000 - s*10),
				StatusCode: "unset", Resource: "{}", Attributes: "{}", Pid: 1, Tid: uint32(s + 1)})
			acct = append(acct, store.SpanAccounting{TraceID: tr, SpanID: fmt.Sprintf("%016x", s+1), Accounted: true, CPUNs: 100, SelfCPUNs: 50, BlockedSites: "[]"})
		}
		if t%3 == 2 { // a batch trace coalescing the two before it
			for k := 1; k <= 2; k++ {
				batch.Links = append(batch.Links, store.SpanLink{TraceID: tr, SpanID: fmt.Sprintf("%016x", 1),
					LinkedTraceID: fmt.Sprintf("%032x", t+1-k), LinkedSpanID: fmt.Sprintf("%016x", 5), Weight: 1, Attributes: "{}"})
			}
		}
	}
	if err := st.WriteSpans(ctx, batch); err != nil {
		b.Fatal(err)
	}
	if err := st.WriteSpanAccounting(ctx, acct); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	queries := 0
	for i := 0; i < b.N; i++ {
		p, err := requests.BuildPath(ctx, store.Plain(st), fmt.Sprintf("%032x", 1+3*(i%600)))
		if err != nil {
			b.Fatal(err)
		}
		if len(p.Coalesced) != 1 {
			b.Fatalf("path has %d coalesced batches", len(p.Coalesced))
		}
		queries += p.Queries
	}
	b.ReportMetric(float64(queries)/float64(b.N), "queries/path")
}
