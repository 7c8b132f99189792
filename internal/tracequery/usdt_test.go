package tracequery

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// usdtWorkload drives testdata/workloads/usdt_args.c through its stdin.
type usdtWorkload struct {
	bin string
	pid int
	in  io.Writer
	out *bufio.Scanner
}

func startUSDT(t *testing.T) *usdtWorkload {
	t.Helper()
	testutil.RequireTool(t, "gcc")
	bin := testutil.BuildWorkload(t, "usdt_args")
	cmd := exec.Command(bin)
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	return &usdtWorkload{bin: bin, pid: cmd.Process.Pid, in: in, out: bufio.NewScanner(out)}
}

func (w *usdtWorkload) ask(t *testing.T, cmd string) string {
	t.Helper()
	fmt.Fprintln(w.in, cmd)
	if !w.out.Scan() {
		t.Fatalf("usdt_args: no answer to %q: %v", cmd, w.out.Err())
	}
	return w.out.Text()
}

// semaphore returns hw:guarded's semaphore and how often its code ran.
func (w *usdtWorkload) semaphore(t *testing.T) (sem, runs int64) {
	t.Helper()
	if _, err := fmt.Sscan(w.ask(t, "sem"), &sem, &runs); err != nil {
		t.Fatal(err)
	}
	return sem, runs
}

// TestUSDTOperandKinds checks that the compiled workload's notes have the
// operand kinds the exactness test means to cover, so that a compiler
// placing them otherwise fails loudly rather than testing less.
func TestUSDTOperandKinds(t *testing.T) {
	bin := testutil.BuildWorkload(t, "usdt_args")
	notes, err := ReadUSDT(bin)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]bool{}
	for _, n := range notes {
		if n.Semaphore == 0 {
			t.Errorf("%s:%s has no semaphore", n.Provider, n.Name)
		}
		for _, op := range strings.Fields(n.Args) {
			a, err := parseUSDTArg(op)
			if err != nil {
				t.Fatalf("%s:%s operand %s: %v", n.Provider, n.Name, op, err)
			}
			kinds[fmt.Sprintf("%s/%d/%v", []string{"reg", "mem", "const"}[a.kind], a.size, a.signed)] = true
		}
	}
	for _, want := range []string{"reg/1/true", "reg/1/false", "reg/2/true", "reg/2/false", "reg/4/true", "reg/4/false", "reg/8/true",
		"mem/4/true", "mem/8/true", "const/4/true"} {
		if !kinds[want] {
			t.Errorf("no %s operand among %v (the workload's build no longer covers it)", want, kinds)
		}
	}
}

// TestUSDTArguments fires markers with operands of every size, sign and
// place a known number of times; counts, sums, minima and maxima must be
// exact. The semaphore counts tracers only while one is attached, so the
// code it guards does not run when nobody traces.
func TestUSDTArguments(t *testing.T) {
	testutil.RequireRoot(t)
	const n = 500
	w := startUSDT(t)
	if sem, runs := w.semaphore(t); sem != 0 || runs != 0 {
		t.Fatalf("before tracing: semaphore %d, guarded code ran %d times; want 0, 0", sem, runs)
	}
	w.ask(t, fmt.Sprintf("run %d", n))
	if _, runs := w.semaphore(t); runs != 0 {
		t.Fatalf("the guarded code ran %d times with nobody tracing", runs)
	}
	src := func(name string) string { return fmt.Sprintf("usdt.%q.hw.%s", w.bin, name) }
	sizes := start(t, fmt.Sprintf(`SELECT count() AS n, sum(arg0), min(arg0), max(arg0), sum(arg1), min(arg1), max(arg1),
		sum(arg2), min(arg2), sum(arg3), max(arg3), sum(arg4), min(arg4), sum(arg5), max(arg5) FROM %s WHERE pid = %d`, src("sizes"), w.pid), nil)
	places := start(t, fmt.Sprintf(`SELECT count() AS n, sum(arg0), min(arg0), sum(arg1), max(arg1), sum(arg2), min(arg3), max(arg3), sum(arg3)
		FROM %s WHERE pid = %d`, src("places"), w.pid), nil)
	guarded := start(t, fmt.Sprintf(`SELECT count() AS n, sum(arg0) FROM %s`, src("guarded")), nil)
	if sem, _ := w.semaphore(t); sem != 1 {
		t.Errorf("while traced: semaphore %d, want 1 (one tracer attached)", sem)
	}
	w.ask(t, fmt.Sprintf("run %d", n))

	// The same values in Go, with C's conversions.
	var want [15]int64
	want[0] = n
	want[2], want[3], want[5], want[6], want[8], want[10], want[12], want[14] = 1<<62, -1<<62, 1<<62, -1<<62, 1<<62, -1<<62, 1<<62, -1<<62
	var pl [9]int64
	pl[0], pl[2], pl[4], pl[6], pl[7] = n, 1<<62, -1<<62, 1<<62, -1<<62
	for i := int64(0); i < n; i++ {
		a, b, c, d := int64(int8(i-100)), int64(uint8(200+i)), int64(int16(-3000+i)), int64(uint16(60000+i))
		e, f := int64(int32(-100000*i)), i*5000000000
		want[1] += a
		want[2], want[3] = min(want[2], a), max(want[3], a)
		want[4] += b
		want[5], want[6] = min(want[5], b), max(want[6], b)
		want[7] += c
		want[8] = min(want[8], c)
		want[9] += d
		want[10] = max(want[10], d)
		want[11] += e
		want[12] = min(want[12], e)
		want[13] += f
		want[14] = max(want[14], f)
		m32, m64, u := int64(int32(-7*i)), i*3, int64(uint32(4000000000-uint32(i)))
		pl[1] += m32
		pl[2] = min(pl[2], m32)
		pl[3] += m64
		pl[4] = max(pl[4], m64)
		pl[5] += 42
		pl[6], pl[7] = min(pl[6], u), max(pl[7], u)
		pl[8] += u
	}
	for _, c := range []struct {
		name string
		s    *Session
		want []int64
	}{{"sizes", sizes, want[:]}, {"places", places, pl[:]}, {"guarded", guarded, []int64{n, n * (n - 1) / 2}}} {
		iv := flush(t, c.s)
		if len(iv.Result.Rows) != 1 {
			t.Fatalf("hw:%s: %d rows", c.name, len(iv.Result.Rows))
		}
		got := iv.Result.Rows[0]
		for i, v := range got {
			if v != c.want[i] {
				t.Errorf("hw:%s %s = %v, want %d", c.name, iv.Result.Columns[i], v, c.want[i])
			}
		}
		if len(iv.Counters) != 0 {
			t.Errorf("hw:%s: losses %v", c.name, iv.Counters)
		}
	}
	if _, runs := w.semaphore(t); runs != n {
		t.Errorf("the guarded code ran %d times while traced, want %d", runs, n)
	}
	guarded.Close()
	if sem, _ := w.semaphore(t); sem != 0 {
		t.Errorf("after the tracer left: semaphore %d, want 0", sem)
	}
	w.ask(t, fmt.Sprintf("run %d", n))
	if _, runs := w.semaphore(t); runs != n {
		t.Errorf("the guarded code ran %d times in all, want %d: it ran after the tracer left", runs, n)
	}
}

func TestUSDTOperandErrors(t *testing.T) {
	for op, want := range map[string]string{
		"4@counter(%rip)": "global variable",
		"8@(%rax,%rbx,8)": "indexed addressing",
		"8@%xmm0":         "unknown register",
		"%rdi":            "no size",
		"x@%rdi":          "size",
		"-4@-20(%rbp)":    "",
		"2@%r8w":          "",
		"-8@$-5":          "",
	} {
		_, err := parseUSDTArg(op)
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("parse %s: %v, want %q", op, err, want)
		}
	}
}
