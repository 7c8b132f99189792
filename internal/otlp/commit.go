package otlp

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// ErrOverloaded is returned when more spans wait for their commit than the
// queue holds: the sender should retry later (OTLP's retryable statuses).
var ErrOverloaded = errors.New("too many spans waiting to be committed")

// ErrClosed is returned for spans that arrive while the receiver stops.
var ErrClosed = errors.New("receiver is shutting down")

// committer groups the spans of concurrent export requests into one store
// transaction, and answers each request only once its spans are durable.
type committer struct {
	write    func(context.Context, *store.SpanBatch) error
	maxDelay time.Duration
	maxSpans int
	maxQueue int

	mu      sync.Mutex
	queued  int
	pending []*pendingBatch
	wake    chan struct{}
	closed  bool
	done    chan struct{}
	stats   Stats
	last    time.Time // the last commit began
}

type pendingBatch struct {
	batch *store.SpanBatch
	done  chan error
}

// Stats counts what the receiver did since it started.
type Stats struct {
	Requests      uint64 `json:"requests"`
	SpansAccepted uint64 `json:"spans_accepted"`
	SpansRejected uint64 `json:"spans_rejected"`
	Refused       uint64 `json:"requests_refused"`
	Commits       uint64 `json:"commits"`
	CommitErrors  uint64 `json:"commit_errors"`
	QueuedSpans   int    `json:"queued_spans"`
	// ConnectionsRefused counts connections over MaxConnections.
	ConnectionsRefused uint64 `json:"connections_refused"`
	// SpansUnattributed counts the local spans stored without thread.id
	// or process.pid, which the kernel accounting cannot charge;
	// LastUnattributed says where the last of them came from.
	SpansUnattributed uint64        `json:"spans_unattributed"`
	LastUnattributed  *Unattributed `json:"last_unattributed,omitempty"`
}

// AttributionFix says how to give spans the attributes the kernel
// accounting needs, per SDK: the OS thread that ran the span, and its
// process (the stock SDKs send neither).
const AttributionFix = `spans need thread.id (the OS thread id, gettid) and process.pid to be charged; add them with a span processor:
  Python: class Tid(SpanProcessor):
              def on_start(self, span, parent_context=None):
                  span.set_attributes({"thread.id": threading.get_native_id(), "process.pid": os.getpid()})
          provider.add_span_processor(Tid())
  Go:     a SpanProcessor whose OnStart calls s.SetAttributes(attribute.Int("thread.id", unix.Gettid())),
          and resource.WithProcessPID() (the goroutine must stay on its thread: runtime.LockOSThread)
  others: the same two attributes from the thread that runs the span`

// Unattributed is a span the accounting cannot charge: its service, what
// it lacked, and the local process that sent it, when its connection
// named one.
type Unattributed struct {
	Service string  `json:"service"`
	Missing string  `json:"missing"`
	Sender  *Sender `json:"sender,omitempty"`
}

func newCommitter(write func(context.Context, *store.SpanBatch) error, maxDelay time.Duration, maxSpans, maxQueue int) *committer {
	c := &committer{write: write, maxDelay: maxDelay, maxSpans: maxSpans, maxQueue: maxQueue,
		wake: make(chan struct{}, 1), done: make(chan struct{})}
	go c.run()
	return c
}

// submit queues b and waits for its commit.
func (c *committer) submit(ctx context.Context, b *store.SpanBatch) error {
	n := len(b.Spans)
	p := &pendingBatch{batch: b, done: make(chan error, 1)}
	c.mu.Lock()
	switch {
	case c.closed:
		c.mu.Unlock()
		return ErrClosed
	case c.queued > 0 && c.queued+n > c.maxQueue:
		c.stats.Refused++
		c.mu.Unlock()
		return ErrOverloaded
	}
	c.queued += n
	c.pending = append(c.pending, p)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		// It may still commit; the sender retries and the span is stored
		// twice rather than lost.
		return ctx.Err()
	}
}

func (c *committer) run() {
	defer close(c.done)
	for {
		c.mu.Lock()
		for len(c.pending) == 0 && !c.closed {
			c.mu.Unlock()
			<-c.wake
			c.mu.Lock()
		}
		if len(c.pending) == 0 && c.closed {
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		// Commits at most every maxDelay: an export after a quiet spell is
		// committed at once, and one sooner waits out the rest of the
		// interval, which the exports coming meanwhile join. Each commit
		// used to wait 100 ms for others: the demo system's services,
		// acknowledged that late, left their CPU idle 1.5 % more (as
		// against a collector that keeps nothing and answers at once;
		// answering 100 ms late, it did the same).
		deadline := time.After(c.maxDelay - time.Since(c.last))
	gather:
		for {
			c.mu.Lock()
			enough := c.queued >= c.maxSpans || c.closed
			c.mu.Unlock()
			if enough {
				break
			}
			select {
			case <-c.wake:
			case <-deadline:
				break gather
			}
		}
		c.last = time.Now()
		c.mu.Lock()
		group := c.pending
		c.pending = nil
		spans := c.queued
		c.queued = 0
		c.mu.Unlock()

		merged := &store.SpanBatch{}
		for _, p := range group {
			merged.Spans = append(merged.Spans, p.batch.Spans...)
			merged.Links = append(merged.Links, p.batch.Links...)
			merged.Events = append(merged.Events, p.batch.Events...)
		}
		err := c.write(context.Background(), merged)
		c.mu.Lock()
		c.stats.Commits++
		if err != nil {
			c.stats.CommitErrors++
		} else {
			c.stats.SpansAccepted += uint64(spans)
		}
		c.mu.Unlock()
		for _, p := range group {
			p.done <- err
		}
	}
}

func (c *committer) close() {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
	<-c.done
}

func (c *committer) snapshot() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.QueuedSpans = c.queued
	return s
}
