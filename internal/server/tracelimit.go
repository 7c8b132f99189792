package server

import (
	"fmt"
	"net/http"
	"sync"
)

// Defaults of the live trace limits (Options.MaxTraces, MaxTraceBytes).
const (
	DefaultMaxTraces     = 4
	DefaultMaxTraceBytes = 256 << 20
)

// traceLimits admits live traces while fewer than max run and their maps
// (tracequery.Plan.MapBytes) fit in maxBytes together.
type traceLimits struct {
	mu       sync.Mutex
	running  int
	bytes    uint64
	max      int
	maxBytes uint64
}

// refusal is why a trace was not admitted, and the status that says so.
type refusal struct {
	code int
	msg  string
}

func (l *traceLimits) acquire(need uint64) (release func(), r *refusal) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case need > l.maxBytes:
		return nil, &refusal{http.StatusBadRequest, fmt.Sprintf("the trace's maps may hold %s, more than the %s all live traces may hold together (--trace-memory): lower map_size, or group by less",
			mib(need), mib(l.maxBytes))}
	case l.running >= l.max:
		return nil, &refusal{http.StatusTooManyRequests, fmt.Sprintf("%d live traces run already, the most at once (--max-traces %d): wait for one to end", l.running, l.max)}
	case l.bytes+need > l.maxBytes:
		return nil, &refusal{http.StatusTooManyRequests, fmt.Sprintf("the trace's maps may hold %s, and the %d live traces running hold %s of the %s allowed (--trace-memory): wait for one to end, or lower map_size",
			mib(need), l.running, mib(l.bytes), mib(l.maxBytes))}
	}
	l.running++
	l.bytes += need
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			l.running--
			l.bytes -= need
			l.mu.Unlock()
		})
	}, nil
}

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
