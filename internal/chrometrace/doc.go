// Package chrometrace writes the Chrome trace event format (JSON object
// form, "traceEvents"), which ui.perfetto.dev and chrome://tracing open: a
// request's spans as complete events on their services' processes and
// threads, and a range's samples as instant events on their threads.
// Timestamps are microseconds with nanosecond fractions.
package chrometrace
