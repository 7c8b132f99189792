// Package otlp receives OpenTelemetry traces: OTLP/gRPC (default
// 127.0.0.1:4317) and OTLP/HTTP, protobuf or JSON (127.0.0.1:4318,
// /v1/traces). Spans become the activity records of request tracing
// (Stardust §3.1, see internal/store's spans tables): trace and span ids
// are the breadcrumbs, links the stitch records, span events intermediate
// records.
//
// An export is acknowledged only once its spans are committed: concurrent
// exports are grouped into one store transaction, at most one every
// CommitDelay (an export after a quiet spell is committed at once), and
// each waits for it. What cannot be stored is answered with
// OTLP's statuses — a request that does not decode is InvalidArgument
// (HTTP 400), one over MaxMessageBytes ResourceExhausted (HTTP 413), an
// unknown content type HTTP 415, each with a google.rpc.Status body; a
// failed commit or a full queue is Unavailable (HTTP 503), which exporters
// retry. Single spans that cannot be stored (a zero or short id, ending
// before they start) are rejected alone through partial success.
//
// A client cannot hold the receiver by sending slowly: an HTTP request
// must arrive within ReadTimeout (else 408), idle connections are closed,
// and each endpoint holds at most MaxConnections at once; one more is
// answered 503 with Retry-After (gRPC: closed, which exporters retry as
// Unavailable) at once rather than left in the kernel's queue.
//
// Spans whose process.pid is a local process are reported through
// OnProcesses, so the accounting of internal/account can start following
// that process's threads.
package otlp
