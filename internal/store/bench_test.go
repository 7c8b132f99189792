package store

import (
	"context"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// BenchmarkWriteEpoch is the commit of one busy 1-second epoch (7000
// samples) into a store already holding two minutes of them.
func BenchmarkWriteEpoch(b *testing.B) {
	s, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	ctx := context.Background()
	var n int64
	for ; n < 120; n++ {
		if err := s.WriteEpoch(ctx, BusyEpoch(rng, n, time.Second, 7000)); err != nil {
			b.Fatal(err)
		}
	}
	epochs := make([]*Epoch, b.N)
	for i := range epochs {
		epochs[i] = BusyEpoch(rng, n+int64(i), time.Second, 7000)
	}
	runtime.GC()
	b.ResetTimer()
	for _, e := range epochs {
		if err := s.WriteEpoch(ctx, e); err != nil {
			b.Fatal(err)
		}
	}
}
