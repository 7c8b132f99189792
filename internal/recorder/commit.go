package recorder

import (
	"errors"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// An always-on recorder outlives its store's faults (a full disk, a
// read-only remount, a deleted data directory): an epoch the store cannot
// take now (store.ErrUnavailable) is held in memory and given again, with
// the epochs after it in order, until the store takes it. What is held is
// bounded; beyond the bounds the oldest held epoch is dropped, and counted
// with its vitals' events and samples. An epoch the sink refuses for any
// other reason is dropped at once, counted the same way.

// Default bounds of the epochs held while the store is unavailable
// (Config.HoldEpochs, HoldSamples): about an hour of one-minute epochs,
// and some tens of MB of samples.
const (
	DefaultHoldEpochs  = 64
	DefaultHoldSamples = 50_000
)

// holdRetry is how often held epochs are given again between epochs.
const holdRetry = time.Second

// committer hands closed epochs to the sink on a goroutine of its own.
type committer struct {
	queue    chan *store.Epoch
	finished chan struct{}
}

func (r *Recorder) startCommitter(sink func(*store.Epoch) error) *committer {
	c := &committer{queue: make(chan *store.Epoch, 2), finished: make(chan struct{})}
	go func() {
		defer close(c.finished)
		h := &held{r: r, sink: sink}
		retry := time.NewTicker(holdRetry)
		defer retry.Stop()
		for {
			select {
			case e, ok := <-c.queue:
				if !ok {
					h.flush()
					h.dropAll()
					return
				}
				h.add(e)
				h.flush()
			case <-retry.C:
				h.flush()
			}
		}
	}()
	return c
}

// stop commits what is queued (and what is held, if the store takes it
// now) and waits for it.
func (c *committer) stop() error {
	close(c.queue)
	<-c.finished
	return nil
}

// held are the epochs waiting for the store, oldest first.
type held struct {
	r       *Recorder
	sink    func(*store.Epoch) error
	epochs  []*store.Epoch
	samples int
	// since is when the store stopped taking epochs; dropped counts the
	// epochs dropped since.
	since   time.Time
	dropped int
}

func (h *held) add(e *store.Epoch) {
	h.epochs = append(h.epochs, e)
	h.samples += len(e.Samples)
	maxEpochs, maxSamples := h.r.cfg.HoldEpochs, h.r.cfg.HoldSamples
	for len(h.epochs) > 1 && (len(h.epochs) > maxEpochs || h.samples > maxSamples) {
		if h.dropped == 0 {
			h.r.cfg.Logf("epoch %d dropped: the store has not taken epochs for %v, and %d are held (at most %d epochs, %d samples); the oldest go first from now on",
				h.epochs[0].Epoch, time.Since(h.since).Round(time.Second), len(h.epochs)-1, maxEpochs, maxSamples)
		}
		h.drop()
	}
	h.publish()
}

// flush gives the held epochs to the sink, oldest first, until one is
// held back by the store.
func (h *held) flush() {
	for len(h.epochs) > 0 {
		e := h.epochs[0]
		err := h.sink(e)
		switch {
		case err == nil:
			h.pop()
			h.r.mu.Lock()
			h.r.status.LastCommitted = e.Epoch
			h.r.mu.Unlock()
			if len(h.epochs) == 0 && !h.since.IsZero() {
				h.r.cfg.Logf("the store takes epochs again: the epochs held since %s are committed, %d were dropped",
					h.since.UTC().Format("15:04:05"), h.dropped)
				h.since, h.dropped = time.Time{}, 0
			}
		case errors.Is(err, store.ErrUnavailable):
			if h.since.IsZero() {
				h.since = time.Now()
				h.r.cfg.Logf("epoch %d not committed, held in memory until the store takes it: %v", e.Epoch, err)
			}
			h.publish()
			return
		default:
			h.r.cfg.Logf("epoch %d not committed, dropped: %v", e.Epoch, err)
			h.drop()
		}
	}
	h.publish()
}

func (h *held) pop() *store.Epoch {
	e := h.epochs[0]
	h.epochs[0] = nil
	h.epochs = h.epochs[1:]
	h.samples -= len(e.Samples)
	return e
}

// drop drops the oldest held epoch, counting what it held.
func (h *held) drop() {
	e := h.pop()
	h.dropped++
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.status.SkippedEpochs++
	for _, v := range e.Vitals {
		if vt, ok := vitalByName(v.Name); ok {
			h.r.status.Vitals[vt].UnstoredEvents += v.Events
			h.r.status.Vitals[vt].UnstoredSamples += v.Samples
		}
	}
}

// dropAll drops what the store did not take before the recorder stopped.
func (h *held) dropAll() {
	if len(h.epochs) > 0 {
		h.r.cfg.Logf("stopping: %d epochs held since %s were never committed (the store did not take them)",
			len(h.epochs), h.since.UTC().Format("15:04:05"))
	}
	for len(h.epochs) > 0 {
		h.drop()
	}
	h.publish()
}

func (h *held) publish() {
	h.r.mu.Lock()
	h.r.status.HeldEpochs = len(h.epochs)
	h.r.mu.Unlock()
}
