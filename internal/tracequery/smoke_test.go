package tracequery

import (
	"fmt"
	"context"
	"os"
	"syscall"
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	for _, q := range []string{
		"SELECT comm, count() AS n FROM syscall.getpid GROUP BY comm ORDER BY n DESC",
		"SELECT comm, count(), hist(count), sum(count), min(ret), max(ret), avg(latency), p99(latency), count_distinct(fd), sample(fd) FROM syscall.read WHERE comm = 'tracequery.test' GROUP BY comm",
		"SELECT pid, ret, str(filename) AS f FROM syscall.openat WHERE pid = " + itoa(os.Getpid()),
		"SELECT count(), hist(latency) FROM sched.runq_latency",
		"SELECT kstack, count() FROM profile.hz_99 GROUP BY kstack ORDER BY count() DESC LIMIT 3",
	} {
		p, err := Compile(q, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		ex, _ := p.Explain(false)
		t.Log(ex)
		s, err := Start(p)
		if err != nil {
			if ve, ok := err.(*VerifierError); ok {
				for _, l := range ve.Log {
					t.Log(l)
				}
			}
			t.Fatal(err)
		}
		for i := 0; i < 100; i++ {
			syscall.Getpid()
			f, _ := os.Open("/etc/hostname")
			b := make([]byte, 100)
			f.Read(b)
			f.Close()
		}
		time.Sleep(100 * time.Millisecond)
		iv, err := s.Flush(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%v %v", iv.Result.Columns, iv.Counters)
		for i, r := range iv.Result.Rows {
			if i < 5 {
				t.Logf("%v", r)
			}
		}
		s.Close()
	}
}

func itoa(i int) string { return fmtInt(i) }

func fmtInt(i int) string { return fmt.Sprint(i) }
