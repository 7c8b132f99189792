package export

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/clickhouse"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/storetest"
	"github.com/holter-dev/holter/internal/testutil"
)

// cpuTime is this process's user and system CPU time so far.
func cpuTime(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// commitAndSpool commits an epoch to the store and spools it, as the
// recorder's committer does, and says what CPU each took.
func commitAndSpool(tb testing.TB, st *store.Store, e *Exporter, ep *store.Epoch) (commit, spool time.Duration) {
	ctx := context.Background()
	c0 := cpuTime(tb)
	if err := st.WriteEpoch(ctx, ep); err != nil {
		tb.Fatal(err)
	}
	c1 := cpuTime(tb)
	if err := e.Committed(ctx, ep.Epoch); err != nil {
		tb.Fatal(err)
	}
	return c1 - c0, cpuTime(tb) - c1
}

// waitShipped waits until the exporter's spool is empty.
func waitShipped(tb testing.TB, e *Exporter, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if st := e.Status(); st.SpooledBatches == 0 && st.LastShippedEpoch == st.LastSpooledEpoch {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	tb.Fatalf("spool not shipped within %v: %+v", within, e.Status())
}

// BenchmarkShip is issue 8's shipping figures, against a real ClickHouse
// (Debian's 18.16) on loopback:
//
//   - throughput: a synthetic store of busy 1-second epochs (7000 samples
//     each, store.BusyEpoch) is committed, spooled and shipped without a
//     rate limit; rows/s is rows over the wall time from the first send
//     to the empty spool, and the CPU this process spent spooling and
//     shipping (getrusage) is set against the CPU of committing the same
//     epochs to the local store, measured in the same run;
//   - end-to-end delay: epochs made in real time at the default rate
//     (2 MB/s), from the epoch's end to the moment a query on ClickHouse
//     first sees it, against the local commit time.
//
// go test -run '^$' -bench Ship -benchtime 1x -count 3 ./internal/export/
func BenchmarkShip(b *testing.B) {
	testutil.RequireRoot(b)
	ch := testutil.StartClickHouse(b, "127.0.0.1")
	const epochs, samples = 30, 7000
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		db := fmt.Sprintf("bench%d", i)
		client, err := clickhouse.New(ch.URL, &clickhouse.Options{Database: db})
		if err != nil {
			b.Fatal(err)
		}
		st, err := store.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		e, err := New(Options{Client: client, Store: st, Host: "h1", SpoolDir: filepath.Join(b.TempDir(), "spool"), Rate: 1 << 40})
		if err != nil {
			b.Fatal(err)
		}
		rng := rand.New(rand.NewPCG(1, uint64(i)))
		var commitCPU, spoolCPU time.Duration
		for n := int64(0); n < epochs; n++ {
			c, sp := commitAndSpool(b, st, e, store.BusyEpoch(rng, n, time.Second, samples))
			commitCPU, spoolCPU = commitCPU+c, spoolCPU+sp
		}
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		c0, t0 := cpuTime(b), time.Now()
		go func() { defer close(done); e.Run(runCtx) }()
		waitShipped(b, e, 5*time.Minute)
		wall, shipCPU := time.Since(t0), cpuTime(b)-c0
		rows := e.Status().ShippedRows
		stop()
		<-done
		rowsPerSec := float64(rows) / wall.Seconds()
		b.ReportMetric(rowsPerSec, "rows/s")
		b.ReportMetric((spoolCPU+shipCPU).Seconds()/float64(rows)*1e6, "cpu-s/Mrows")
		b.ReportMetric(float64(spoolCPU+shipCPU)/float64(commitCPU), "cpu-vs-commit")
		b.Logf("throughput: %d rows of %d epochs in %v = %.0f rows/s; CPU: spool %v + ship %v (%.2f cores while shipping) vs commit %v: ratio %.2f",
			rows, epochs, wall.Round(time.Millisecond), rowsPerSec, spoolCPU.Round(time.Millisecond), shipCPU.Round(time.Millisecond),
			shipCPU.Seconds()/wall.Seconds(), commitCPU.Round(time.Millisecond), float64(spoolCPU+shipCPU)/float64(commitCPU))
		st.Close()

		// End to end, at the default rate, with smaller epochs (1000
		// samples) as a recorder at its defaults writes on a quiet host.
		st, err = store.Open(b.TempDir(), nil)
		if err != nil {
			b.Fatal(err)
		}
		e, err = New(Options{Client: client, Store: st, Host: "h2", SpoolDir: filepath.Join(b.TempDir(), "spool")})
		if err != nil {
			b.Fatal(err)
		}
		runCtx, stop = context.WithCancel(ctx)
		done = make(chan struct{})
		go func() { defer close(done); e.Run(runCtx) }()
		var delays, commits []time.Duration
		for n := int64(0); n < 10; n++ {
			ep := store.BusyEpoch(rng, n, time.Second, 1000)
			ep.Host = "h2"
			end := time.Now()
			ep.StartNs, ep.EndNs = end.Add(-time.Second).UnixNano(), end.UnixNano()
			if err := st.WriteEpoch(ctx, ep); err != nil {
				b.Fatal(err)
			}
			if err := e.Committed(ctx, n); err != nil {
				b.Fatal(err)
			}
			commits = append(commits, time.Since(end))
			for {
				res, err := client.Query(ctx, fmt.Sprintf("SELECT count() FROM samples WHERE host = 'h2' AND epoch = %d", n))
				if err == nil && len(res.Rows) == 1 && toInt(res.Rows[0][0]) == int64(len(ep.Samples)) {
					break
				}
				if time.Since(end) > time.Minute {
					b.Fatalf("epoch %d not queryable after a minute: %v %+v", n, err, e.Status())
				}
				time.Sleep(5 * time.Millisecond)
			}
			delays = append(delays, time.Since(end))
		}
		stop()
		<-done
		st.Close()
		med := func(ds []time.Duration) time.Duration {
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return ds[len(ds)/2]
		}
		b.ReportMetric(med(delays).Seconds()*1000, "e2e-ms")
		b.Logf("end to end (epoch end to queryable, all its samples): median %v, min %v, max %v over %d epochs; local commit median %v: ratio %.1f",
			med(delays).Round(time.Millisecond), delays[0].Round(time.Millisecond), delays[len(delays)-1].Round(time.Millisecond), len(delays),
			med(commits).Round(time.Millisecond), float64(med(delays))/float64(med(commits)))
	}
}

// BenchmarkSpool is the part of shipping that runs on the recorder's
// committer: reading what one busy epoch (7000 samples) added and writing
// it to the spool; its CPU is set against the commit's of the same epoch.
//
// go test -run '^$' -bench Spool -count 3 ./internal/export/
func BenchmarkSpool(b *testing.B) {
	st := storetest.Open(b)
	client, _ := clickhouse.New("http://127.0.0.1:1", nil) // never reached: nothing runs the exporter
	e, err := New(Options{Client: client, Store: st, Host: "h1", SpoolDir: filepath.Join(b.TempDir(), "spool"), SpoolLimit: 1 << 40})
	if err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var commitCPU, spoolCPU time.Duration
	b.ResetTimer()
	for n := int64(0); n < int64(b.N); n++ {
		c, sp := commitAndSpool(b, st, e, store.BusyEpoch(rng, n, time.Second, 7000))
		commitCPU, spoolCPU = commitCPU+c, spoolCPU+sp
	}
	b.ReportMetric(float64(spoolCPU)/float64(commitCPU), "cpu-vs-commit")
	b.ReportMetric(spoolCPU.Seconds()/float64(b.N)*1000, "spool-cpu-ms/epoch")
}
