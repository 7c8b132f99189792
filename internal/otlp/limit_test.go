package otlp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/holter-dev/holter/internal/store"
)

// TestSlowBodiesCannotHoldTheReceiver opens more connections than the HTTP
// endpoint holds, each sending its headers and one byte of a large body,
// then nothing. Those over the limit are answered 503 with Retry-After at
// once; those within it are cut off once ReadTimeout passes; then an
// exporter's spans are stored as usual.
func TestSlowBodiesCannotHoldTheReceiver(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const limit, slow, readTimeout = 8, 40, 2 * time.Second
	r, err := Listen(Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Host: "testhost", Write: st.WriteSpans,
		ReadTimeout: readTimeout, MaxConnections: limit})
	if err != nil {
		t.Fatal(err)
	}
	r.Serve()
	t.Cleanup(func() { r.Shutdown(context.Background()) })

	type outcome struct {
		status string
		after  time.Duration
	}
	outcomes := make(chan outcome, slow)
	var wg sync.WaitGroup
	start := time.Now()
	for range slow {
		c, err := net.Dial("tcp", r.HTTPAddr())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprintf(c, "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: %s\r\nContent-Length: 100000\r\n\r\n\x0a", contentProtobuf)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Whatever the server answers, it must end the connection.
			c.SetReadDeadline(time.Now().Add(readTimeout + 30*time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			io.Copy(io.Discard, c)
			outcomes <- outcome{strings.TrimSpace(line), time.Since(start)}
		}()
	}
	wg.Wait()
	close(outcomes)
	counts := map[string]int{}
	var latest time.Duration
	for o := range outcomes {
		counts[o.status]++
		latest = max(latest, o.after)
	}
	t.Logf("%d slow connections, %d held at most: %v; the last ended after %v", slow, limit, counts, latest.Round(time.Millisecond))
	if counts["HTTP/1.1 503 Service Unavailable"] == 0 {
		t.Errorf("no connection over the limit was answered 503")
	}
	if counts["HTTP/1.1 408 Request Timeout"] == 0 {
		t.Errorf("no slow body was cut off with 408")
	}
	if n := counts["HTTP/1.1 503 Service Unavailable"] + counts["HTTP/1.1 408 Request Timeout"]; n != slow {
		t.Errorf("%d of %d slow connections were answered 503 or 408", n, slow)
	}
	if latest > readTimeout+20*time.Second {
		t.Errorf("slow connections were held %v, ReadTimeout is %v", latest, readTimeout)
	}
	if s := r.Stats(); s.ConnectionsRefused == 0 {
		t.Errorf("stats count no refused connection: %+v", s)
	}

	// The slots are free again: an exporter's spans go in.
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpoint(r.HTTPAddr()), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	sc := sendWithSDK(t, exp, "after-slow")
	res, err := st.Query(context.Background(), `SELECT count(*) FROM spans WHERE trace_id = ?`, sc.TraceID().String())
	if err != nil || res.Rows[0][0] != int64(2) {
		t.Fatalf("spans after the slow connections: %v, %v", res, err)
	}
}

// TestConnectionOverTheLimit: an exporter whose connection is over the
// limit is told to retry: 503 with Retry-After over HTTP, Unavailable over
// gRPC, at once.
func TestConnectionOverTheLimit(t *testing.T) {
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	r, err := Listen(Options{GRPCAddr: "127.0.0.1:0", HTTPAddr: "127.0.0.1:0", Write: st.WriteSpans, MaxConnections: 1})
	if err != nil {
		t.Fatal(err)
	}
	r.Serve()
	t.Cleanup(func() { r.Shutdown(context.Background()) })
	for _, addr := range []string{r.HTTPAddr(), r.GRPCAddr()} {
		hold, err := net.Dial("tcp", addr) // takes the only slot: it is accepted first
		if err != nil {
			t.Fatal(err)
		}
		defer hold.Close()
	}
	resp, err := http.Post("http://"+r.HTTPAddr()+"/v1/traces", contentProtobuf, strings.NewReader(""))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("HTTP over the limit: %s, Retry-After %q; want 503 with Retry-After", resp.Status, resp.Header.Get("Retry-After"))
	}
	conn, err := grpc.NewClient(r.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = coltracepb.NewTraceServiceClient(conn).Export(ctx, &coltracepb.ExportTraceServiceRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("gRPC over the limit: %v, want Unavailable", err)
	}
}
