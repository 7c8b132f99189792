package otlp

import (
	"bytes"
	"compress/gzip"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/holter-dev/holter/internal/store"
)

// fuzzJSON is an export of two spans, one with a link and an event.
const fuzzJSON = `{"resourceSpans":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"front"}},
	{"key":"process.pid","value":{"intValue":"4242"}}]},
	"scopeSpans":[{"spans":[
	{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"0102030405060708","name":"GET /item","kind":2,
	 "startTimeUnixNano":"1000","endTimeUnixNano":"5000","attributes":[{"key":"enduser.id","value":{"stringValue":"alice"}}]},
	{"traceId":"0102030405060708090a0b0c0d0e0f10","spanId":"1112131415161718","parentSpanId":"0102030405060708","name":"read",
	 "startTimeUnixNano":"2000","endTimeUnixNano":"3000","attributes":[{"key":"thread.id","value":{"intValue":"4243"}}],
	 "links":[{"traceId":"09090000000000000000000000000000","spanId":"0700000000000000","attributes":[{"key":"holter.weight","value":{"doubleValue":2.5}}]}],
	 "events":[{"timeUnixNano":"2500","name":"cache miss","attributes":[{"key":"bytes","value":{"intValue":"512"}}]}],
	 "status":{"code":2,"message":"boom"}}]}]}]}`

// FuzzOTLPHTTP posts what it is given to the OTLP/HTTP handler, as
// protobuf or JSON, plain or gzipped, with a real store behind it: no
// request may crash it or get a 5xx, a 200 must carry a response in the
// request's encoding, and every span acknowledged must be in the store.
func FuzzOTLPHTTP(f *testing.F) {
	var seed coltracepb.ExportTraceServiceRequest
	if err := decodeJSON([]byte(fuzzJSON), &seed); err != nil {
		f.Fatal(err)
	}
	pb, err := proto.Marshal(&seed)
	if err != nil {
		f.Fatal(err)
	}
	gz := func(b []byte) []byte {
		var buf bytes.Buffer
		w := gzip.NewWriter(&buf)
		w.Write(b)
		w.Close()
		return buf.Bytes()
	}
	for _, s := range []struct {
		body         []byte
		json, zipped bool
	}{
		{pb, false, false}, {[]byte(fuzzJSON), true, false}, {gz(pb), false, true}, {gz([]byte(fuzzJSON)), true, true},
		{[]byte{0xff, 0xff, 0xff}, false, false}, {[]byte(`{"resourceSpans": [`), true, false}, {[]byte("not gzip"), false, true},
		{[]byte(`{"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":"zz","spanId":"0102030405060708"}]}]}]}`), true, false},
		{[]byte(`{"resourceSpans":{"a":1}}`), true, false}, {nil, false, false}, {[]byte("{}"), true, false},
	} {
		f.Add(s.body, s.json, s.zipped)
	}
	st, err := store.Open(f.TempDir(), nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { st.Close() })
	r, err := Listen(Options{DisableGRPC: true, DisableHTTP: true, Host: "fuzzhost", Write: st.WriteSpans,
		MaxMessageBytes: 1 << 20, CommitDelay: time.Microsecond})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { r.Shutdown(context.Background()) })
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, body []byte, asJSON, zipped bool) {
		ctype := contentProtobuf
		if asJSON {
			ctype = contentJSON
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/traces", bytes.NewReader(body))
		req.Header.Set("Content-Type", ctype)
		if zipped {
			req.Header.Set("Content-Encoding", "gzip")
		}
		w := httptest.NewRecorder()
		r.serveHTTP(w, req)
		switch w.Code {
		case http.StatusOK:
			resp := &coltracepb.ExportTraceServiceResponse{}
			var err error
			if asJSON {
				err = protojson.Unmarshal(w.Body.Bytes(), resp)
			} else {
				err = proto.Unmarshal(w.Body.Bytes(), resp)
			}
			if err != nil {
				t.Fatalf("a 200 whose body is not a %s ExportTraceServiceResponse: %v", ctype, err)
			}
		case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("answered %d: %s", w.Code, w.Body.Bytes())
		}
		res, err := st.Query(ctx, `SELECT count(*) FROM spans`)
		if err != nil {
			t.Fatal(err)
		}
		if stored, acked := res.Rows[0][0].(int64), r.Stats().SpansAccepted; uint64(stored) != acked {
			t.Fatalf("%d spans acknowledged, %d in the store", acked, stored)
		}
	})
}
