package otlp

import (
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/holter-dev/holter/internal/store"
)

// Attribute keys holter reads. thread.id and process.pid are OpenTelemetry
// semantic conventions; a span carrying both (the pid may also come from
// its resource) is charged its thread's kernel activity.
const (
	AttrServiceName = "service.name"
	AttrHostName    = "host.name"
	AttrProcessPid  = "process.pid"
	AttrThreadID    = "thread.id"
	// AttrEndUser and AttrClientID name the client a request is billed to
	// (Stardust tags requests with the user's id where they enter).
	AttrEndUser  = "enduser.id"
	AttrClientID = "client.id"
	// AttrLinkWeight on a link sets its share when the linking span's work
	// is billed to the linked requests (default 1: equal shares).
	AttrLinkWeight = "holter.weight"
)

// converted is one request's spans, ready to commit.
type converted struct {
	batch    store.SpanBatch
	rejected int64
	// reasons says why spans were rejected, first few.
	reasons []string
	// pids are the local processes the spans came from.
	pids map[uint32]bool
}

var spanKinds = map[tracepb.Span_SpanKind]string{
	tracepb.Span_SPAN_KIND_UNSPECIFIED: "unspecified",
	tracepb.Span_SPAN_KIND_INTERNAL:    "internal",
	tracepb.Span_SPAN_KIND_SERVER:      "server",
	tracepb.Span_SPAN_KIND_CLIENT:      "client",
	tracepb.Span_SPAN_KIND_PRODUCER:    "producer",
	tracepb.Span_SPAN_KIND_CONSUMER:    "consumer",
}

var statusCodes = map[tracepb.Status_StatusCode]string{
	tracepb.Status_STATUS_CODE_UNSET: "unset",
	tracepb.Status_STATUS_CODE_OK:    "ok",
	tracepb.Status_STATUS_CODE_ERROR: "error",
}

// convert turns an export request into table rows. Spans that cannot be
// stored (ids of the wrong length or all zero, ending before they start)
// are rejected one by one, as OTLP's partial success allows; the rest are
// kept.
func convert(req *coltracepb.ExportTraceServiceRequest, localHost string, receivedNs int64) *converted {
	c := &converted{pids: map[uint32]bool{}}
	reject := func(format string, a ...any) {
		c.rejected++
		if len(c.reasons) < 3 {
			c.reasons = append(c.reasons, fmt.Sprintf(format, a...))
		}
	}
	for _, rs := range req.GetResourceSpans() {
		res := attrMap(rs.GetResource().GetAttributes())
		service, _ := res[AttrServiceName].(string)
		if service == "" {
			service = "unknown_service"
		}
		host, _ := res[AttrHostName].(string)
		local := host == "" || host == localHost
		if host == "" {
			host = localHost
		}
		resPid, _ := asUint32(res[AttrProcessPid])
		resJSON := toJSON(res)
		for _, ss := range rs.GetScopeSpans() {
			scope := ss.GetScope().GetName()
			for _, sp := range ss.GetSpans() {
				traceID, spanID := sp.GetTraceId(), sp.GetSpanId()
				switch {
				case !validID(traceID, 16):
					reject("span %q: trace_id must be 16 bytes, not all zero (got %d bytes)", sp.GetName(), len(traceID))
					continue
				case !validID(spanID, 8):
					reject("span %q: span_id must be 8 bytes, not all zero (got %d bytes)", sp.GetName(), len(spanID))
					continue
				case len(sp.GetParentSpanId()) != 0 && len(sp.GetParentSpanId()) != 8:
					reject("span %q: parent_span_id must be empty or 8 bytes (got %d)", sp.GetName(), len(sp.GetParentSpanId()))
					continue
				case sp.GetEndTimeUnixNano() < sp.GetStartTimeUnixNano():
					reject("span %q: ends before it starts", sp.GetName())
					continue
				case sp.GetStartTimeUnixNano() > math.MaxInt64 || sp.GetEndTimeUnixNano() > math.MaxInt64:
					reject("span %q: time out of range", sp.GetName())
					continue
				}
				attrs := attrMap(sp.GetAttributes())
				pid := resPid
				if p, ok := asUint32(attrs[AttrProcessPid]); ok {
					pid = p
				}
				tid, _ := asUint32(attrs[AttrThreadID])
				client, _ := attrs[AttrEndUser].(string)
				if client == "" {
					client, _ = attrs[AttrClientID].(string)
				}
				if local && pid != 0 {
					c.pids[pid] = true
				}
				tr, id := hex.EncodeToString(traceID), hex.EncodeToString(spanID)
				parent := ""
				if validID(sp.GetParentSpanId(), 8) {
					parent = hex.EncodeToString(sp.GetParentSpanId())
				}
				c.batch.Spans = append(c.batch.Spans, store.Span{
					Host: host, TraceID: tr, SpanID: id, ParentSpanID: parent, Service: service, Name: sp.GetName(),
					Kind: spanKinds[sp.GetKind()], StartNs: int64(sp.GetStartTimeUnixNano()), EndNs: int64(sp.GetEndTimeUnixNano()),
					StatusCode: statusCodes[sp.GetStatus().GetCode()], StatusMessage: sp.GetStatus().GetMessage(),
					Pid: pid, Tid: tid, Client: client, Scope: scope, Resource: resJSON, Attributes: toJSON(attrs),
					ReceivedNs: receivedNs,
				})
				for _, l := range sp.GetLinks() {
					if !validID(l.GetTraceId(), 16) || !validID(l.GetSpanId(), 8) {
						continue // a link to nothing stitches nothing
					}
					la := attrMap(l.GetAttributes())
					weight := 1.0
					if w, ok := asFloat(la[AttrLinkWeight]); ok && w >= 0 {
						weight = w
					}
					c.batch.Links = append(c.batch.Links, store.SpanLink{TraceID: tr, SpanID: id,
						LinkedTraceID: hex.EncodeToString(l.GetTraceId()), LinkedSpanID: hex.EncodeToString(l.GetSpanId()),
						Weight: weight, Attributes: toJSON(la)})
				}
				for _, e := range sp.GetEvents() {
					c.batch.Events = append(c.batch.Events, store.SpanEvent{TraceID: tr, SpanID: id,
						TsNs: int64(min(e.GetTimeUnixNano(), math.MaxInt64)), Name: e.GetName(), Attributes: toJSON(attrMap(e.GetAttributes()))})
				}
			}
		}
	}
	return c
}

func validID(b []byte, n int) bool {
	if len(b) != n {
		return false
	}
	for _, x := range b {
		if x != 0 {
			return true
		}
	}
	return false
}

func attrMap(kvs []*commonpb.KeyValue) map[string]any {
	m := make(map[string]any, len(kvs))
	for _, kv := range kvs {
		m[kv.GetKey()] = anyValue(kv.GetValue())
	}
	return m
}

func anyValue(v *commonpb.AnyValue) any {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_BoolValue:
		return x.BoolValue
	case *commonpb.AnyValue_IntValue:
		return x.IntValue
	case *commonpb.AnyValue_DoubleValue:
		if math.IsNaN(x.DoubleValue) || math.IsInf(x.DoubleValue, 0) {
			return fmt.Sprint(x.DoubleValue) // JSON has no NaN
		}
		return x.DoubleValue
	case *commonpb.AnyValue_BytesValue:
		return base64.StdEncoding.EncodeToString(x.BytesValue)
	case *commonpb.AnyValue_ArrayValue:
		out := make([]any, 0, len(x.ArrayValue.GetValues()))
		for _, e := range x.ArrayValue.GetValues() {
			out = append(out, anyValue(e))
		}
		return out
	case *commonpb.AnyValue_KvlistValue:
		return attrMap(x.KvlistValue.GetValues())
	}
	return nil
}

func asUint32(v any) (uint32, bool) {
	switch x := v.(type) {
	case int64:
		if x > 0 && x <= math.MaxUint32 {
			return uint32(x), true
		}
	case float64:
		if x > 0 && x <= math.MaxUint32 && x == math.Trunc(x) {
			return uint32(x), true
		}
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

func toJSON(m map[string]any) string {
	b, err := json.Marshal(m)
	if err != nil {
		return "{}"
	}
	return string(b)
}

// idFields are the OTLP/JSON fields that hold trace and span ids: OTLP/JSON
// writes them in hex, where protobuf's JSON mapping would use base64.
var idFields = map[string]bool{
	"traceId": true, "spanId": true, "parentSpanId": true,
	"trace_id": true, "span_id": true, "parent_span_id": true,
}

// hexIDsToBase64 rewrites the id fields of decoded OTLP/JSON in place so
// protojson can read the rest.
func hexIDsToBase64(v any, path string) error {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && idFields[k] {
				if s == "" {
					continue
				}
				b, err := hex.DecodeString(s)
				if err != nil {
					return fmt.Errorf("%s.%s: %q is not a hex id", path, k, s)
				}
				x[k] = base64.StdEncoding.EncodeToString(b)
				continue
			}
			if err := hexIDsToBase64(e, path+"."+k); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := hexIDsToBase64(e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
				return err
			}
		}
	}
	return nil
}

// summary is the message of a partial success.
func (c *converted) summary() string {
	if c.rejected == 0 {
		return ""
	}
	return fmt.Sprintf("%d spans rejected: %s", c.rejected, strings.Join(c.reasons, "; "))
}
