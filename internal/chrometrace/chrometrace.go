package chrometrace

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"sort"
	"strings"

	"github.com/holter-dev/holter/internal/requests"
	"github.com/holter-dev/holter/internal/store"
)

// Event is one trace event. Ph is its phase: X a complete event (Dur set),
// i an instant (S its scope: t for the thread), M metadata (a process or
// thread name in Args["name"]).
type Event struct {
	Name string         `json:"name"`
	Cat  string         `json:"cat,omitempty"`
	Ph   string         `json:"ph"`
	Ts   float64        `json:"ts"`
	Dur  *float64       `json:"dur,omitempty"`
	Pid  uint32         `json:"pid"`
	Tid  uint32         `json:"tid"`
	S    string         `json:"s,omitempty"`
	Args map[string]any `json:"args,omitempty"`
}

// Trace is a trace file's contents.
type Trace struct {
	TraceEvents     []Event `json:"traceEvents"`
	DisplayTimeUnit string  `json:"displayTimeUnit"`
}

// Write writes events as a trace file.
func Write(w io.Writer, events []Event) error {
	enc := json.NewEncoder(w)
	if err := enc.Encode(Trace{TraceEvents: events, DisplayTimeUnit: "ns"}); err != nil {
		return fmt.Errorf("write trace events: %w", err)
	}
	return nil
}

// Micros is nanoseconds as the format's microseconds.
func Micros(ns int64) float64 { return float64(ns) / 1e3 }

// Names adds the metadata events naming processes and threads.
type Names struct {
	procs   map[uint32]string
	threads map[[2]uint32]string
}

// Process names pid.
func (n *Names) Process(pid uint32, name string) {
	if n.procs == nil {
		n.procs = map[uint32]string{}
	}
	n.procs[pid] = name
}

// Thread names tid of pid.
func (n *Names) Thread(pid, tid uint32, name string) {
	if n.threads == nil {
		n.threads = map[[2]uint32]string{}
	}
	n.threads[[2]uint32{pid, tid}] = name
}

// Events are the metadata events, in pid and tid order.
func (n *Names) Events() []Event {
	var out []Event
	for pid, name := range n.procs {
		out = append(out, Event{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}})
	}
	for k, name := range n.threads {
		out = append(out, Event{Name: "thread_name", Ph: "M", Pid: k[0], Tid: k[1], Args: map[string]any{"name": name}})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Pid != b.Pid {
			return a.Pid < b.Pid
		}
		if a.Tid != b.Tid {
			return a.Tid < b.Tid
		}
		return a.Name < b.Name
	})
	return out
}

// synthetic is a stable id for a name, above the kernel's pid range, for
// spans that name no process or thread.
func synthetic(name string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return 1<<22 + h.Sum32()%(1<<30)
}

// Path is a request's causal path as complete events: each span on its
// process (service@host when its pid is unknown) and thread, with its
// kernel costs as arguments.
func Path(p *requests.Path) []Event {
	var names Names
	var events []Event
	var walk func(n *requests.Node)
	walk = func(n *requests.Node) {
		pid, tid := n.Pid, n.Tid
		proc := fmt.Sprintf("%s@%s", n.Service, n.Host)
		if pid == 0 {
			pid = synthetic(proc)
		} else {
			proc = fmt.Sprintf("%s (pid %d)", proc, n.Pid)
		}
		if tid == 0 {
			tid = pid
		}
		names.Process(pid, proc)
		dur := Micros(n.DurationNs)
		args := map[string]any{"trace_id": n.TraceID, "span_id": n.SpanID, "kind": n.Kind, "self_ns": n.SelfNs}
		if n.ParentID != "" {
			args["parent_span_id"] = n.ParentID
		}
		if n.Error {
			args["error"] = true
		}
		if k := n.Kernel; k != nil && k.Accounted {
			args["cpu_ns"], args["self_cpu_ns"], args["blocked_ns"] = k.CPUNs, k.SelfCPUNs, k.BlockedNs
			args["runnable_ns"], args["io_bytes"], args["dirtied_bytes"] = k.RunnableNs, k.IOBytes, k.DirtiedBytes
		}
		events = append(events, Event{Name: n.Service + " " + n.Operation, Cat: "span", Ph: "X",
			Ts: Micros(n.StartNs), Dur: &dur, Pid: pid, Tid: tid, Args: args})
		for _, c := range n.Children {
			walk(c)
		}
	}
	for _, r := range p.Roots {
		walk(r)
	}
	return append(names.Events(), events...)
}

// MaxSamples bounds a range's samples in one trace.
const MaxSamples = 100000

// Samples reads the samples of [fromNs, toNs) — of one vital when vital
// is not "", of one process when pid ≥ 0 — as instant events on their
// threads, named by vital, with their weight and delay or latency as
// arguments. vital must be a known vital's name (it is put in the SQL).
func Samples(ctx context.Context, q store.Querier, fromNs, toNs int64, vital string, pid int64) ([]Event, bool, error) {
	where := fmt.Sprintf("ts_ns >= %d AND ts_ns < %d", fromNs, toNs)
	if vital != "" {
		where += fmt.Sprintf(" AND vital = '%s'", strings.ReplaceAll(vital, "'", "''"))
	}
	if pid >= 0 {
		where += fmt.Sprintf(" AND pid = %d", pid)
	}
	res, err := q.Query(ctx, fmt.Sprintf(`SELECT ts_ns, vital, pid, tid, comm, exe, weight, delay_ns, latency_ns
		FROM samples WHERE %s ORDER BY ts_ns LIMIT %d`, where, MaxSamples+1))
	if err != nil {
		return nil, false, fmt.Errorf("samples: %w", err)
	}
	truncated := len(res.Rows) > MaxSamples
	if truncated {
		res.Rows = res.Rows[:MaxSamples]
	}
	var names Names
	var events []Event
	for _, r := range res.Rows {
		ts, _ := toInt(r[0])
		p, _ := toInt(r[2])
		t, _ := toInt(r[3])
		comm, exe := fmt.Sprint(r[4]), fmt.Sprint(r[5])
		names.Process(uint32(p), fmt.Sprintf("%s (pid %d)", exe, p))
		names.Thread(uint32(p), uint32(t), comm)
		args := map[string]any{"weight": r[6]}
		if d, ok := toInt(r[7]); ok {
			args["delay_ns"] = d
		}
		if l, ok := toInt(r[8]); ok {
			args["latency_ns"] = l
		}
		events = append(events, Event{Name: fmt.Sprint(r[1]), Cat: "sample", Ph: "i", S: "t", Ts: Micros(ts),
			Pid: uint32(p), Tid: uint32(t), Args: args})
	}
	return append(names.Events(), events...), truncated, nil
}

// toInt reads an integer column as the store or the API gives it.
func toInt(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int32:
		return int64(x), true
	case uint32:
		return int64(x), true
	case uint64:
		return int64(x), true
	case json.Number:
		n, err := x.Int64()
		return n, err == nil
	case float64:
		return int64(x), true
	}
	return 0, false
}
