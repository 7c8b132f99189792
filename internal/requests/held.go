package requests

import (
	"cmp"
	"context"
	"slices"
	"sync"

	"github.com/holter-dev/holter/internal/store"
)

// Held keeps in memory the spans committed lately that name a thread, so
// the accounting pass that runs every second charges them without reading
// them back: on the demo system, that pass's three queries over the last
// seconds' spans were a quarter of what the recorder spent. The spans it
// cannot charge from memory — received before it held every span (the
// first seconds, or a span longer than it holds them), or not chargeable
// by the time it lets them go — are left to the store's pass (Pass).
type Held struct {
	mu sync.Mutex
	// keep is how long (ns) a span is held after it was received.
	keep int64
	// horizon is a receive time since which every span naming a thread
	// is held: a span that started at or after it has all its children on
	// its thread held too (they end inside it, and are received after
	// they end, on the same host's clock).
	horizon int64
	spans   []heldSpan
}

type heldSpan struct {
	pendingSpan
	parent   string
	received int64
	done     bool // charged, or left to the store's pass
}

// NewHeld holds the spans received from nowNs on for keep ns each.
func NewHeld(nowNs, keep int64) *Held {
	return &Held{keep: keep, horizon: nowNs}
}

// Add holds the spans of b, a committed batch, that name a thread.
func (h *Held) Add(b *store.SpanBatch) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := range b.Spans {
		sp := &b.Spans[i]
		if sp.Tid == 0 || sp.Pid == 0 || sp.ReceivedNs < h.horizon {
			continue
		}
		h.spans = append(h.spans, heldSpan{pendingSpan: pendingSpan{trace: sp.TraceID, span: sp.SpanID,
			thread: thread{sp.Host, sp.Pid, sp.Tid}, start: sp.StartNs, end: sp.EndNs}, parent: sp.ParentSpanID,
			received: sp.ReceivedNs})
	}
}

// take returns the held spans that ended before limit and the children
// of each on its thread, marks them done, and lets go of the spans
// received before nowNs - keep. left says whether some ended before limit
// that memory cannot charge.
func (h *Held) take(limit, nowNs int64) (spans []pendingSpan, children map[parentKey][]interval, left bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	children = map[parentKey][]interval{}
	for i := range h.spans {
		s := &h.spans[i]
		if s.done || s.end >= limit {
			continue
		}
		s.done = true
		if s.start < h.horizon {
			left = true
			continue
		}
		spans = append(spans, s.pendingSpan)
		children[parentKey{s.trace, s.span, s.thread}] = nil
	}
	for i := range h.spans {
		s := &h.spans[i]
		if s.parent == "" {
			continue
		}
		p := parentKey{s.trace, s.parent, s.thread}
		if kids, ok := children[p]; ok {
			children[p] = append(kids, interval{s.start, s.end})
		}
	}
	cut := nowNs - h.keep
	kept := h.spans[:0]
	for _, s := range h.spans {
		if s.received >= cut {
			kept = append(kept, s)
		} else if !s.done {
			left = true
		}
	}
	clear(h.spans[len(kept):])
	h.spans = kept
	h.horizon = max(h.horizon, cut)
	slices.SortFunc(spans, func(a, b pendingSpan) int {
		return cmp.Or(cmp.Compare(a.thread.host, b.thread.host), cmp.Compare(a.thread.pid, b.thread.pid),
			cmp.Compare(a.thread.tid, b.thread.tid), cmp.Compare(a.start, b.start))
	})
	return spans, children, left
}

// Pass charges the spans that have become chargeable: those held in
// memory, if held is not nil, and those in the store it left, or all
// those received in the last RecentLookback when held is nil; every
// thirtieth pass (pass counts them) also charges the rest received in
// the last ten minutes from the store, and with them any that memory took
// but failed to write. It returns how many it charged.
func Pass(ctx context.Context, st *store.Store, tr Tracker, held *Held, nowNs int64, pass int) (int, error) {
	limit := tr.Watermark() - AccountGrace
	n, left := 0, held == nil
	if held != nil {
		spans, children, l := held.take(limit, nowNs)
		left = l
		var err error
		n, err = chargePending(ctx, st, tr, spans, func([]thread, int64, int64) (map[parentKey][]interval, error) {
			return children, nil
		})
		if err != nil {
			return n, err
		}
	}
	lookback := int64(0)
	switch {
	case pass%30 == 0:
		lookback = accountLookback
	case left:
		lookback = RecentLookback
	}
	if lookback == 0 {
		return n, nil
	}
	m, err := accountStored(ctx, st, tr, limit, nowNs-lookback)
	return n + m, err
}
