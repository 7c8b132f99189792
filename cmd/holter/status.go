package main

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/holter-dev/holter/internal/otlp"
	"io"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/holter-dev/holter/internal/recorder"
	"github.com/holter-dev/holter/internal/store"
)

func runStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	af := addAgentFlags(fs)
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parse(fs, args); err != nil {
		return err
	}
	c, ok := af.agent()
	if !ok {
		data := *af.data
		if _, err := os.Stat(filepath.Join(data, store.FileName)); err != nil {
			return fmt.Errorf("no recorder is running for %s, and there is no recording there", data)
		}
		res, err := answer(agentFlags{data: &data, api: new(string), token: &apiToken{}}, `SELECT epoch, epoch_ms(end_ns // 1000000) AS ended, samples, lost FROM epochs ORDER BY epoch DESC LIMIT 1`, store.DefaultQueryTimeout)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "no recorder is running for %s\n", data)
		if len(res.Rows) > 0 {
			fmt.Fprintln(stdout, "last recorded epoch:")
			return res.WriteTable(stdout)
		}
		return nil
	}
	st, err := c.status(context.Background())
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	printStatus(stdout, st)
	return nil
}

// agentStatus is what a recorder's /api/status answers: the recorder's,
// and request tracing's once it runs.
type agentStatus struct {
	recorder.Status
	// Storage is the store's: whether it takes writes.
	Storage  *store.Health   `json:"storage,omitempty"`
	Requests *requestsStatus `json:"requests,omitempty"`
}

func printStatus(w io.Writer, s *agentStatus) {
	fmt.Fprintf(w, "host %s, recording since %s, epochs of %s\n", s.Host, s.Started.Format("2006-01-02 15:04:05 UTC"), s.Epoch)
	budget := "no budget"
	if s.BudgetPercent > 0 {
		budget = fmt.Sprintf("budget %g%%", s.BudgetPercent)
	}
	fmt.Fprintf(w, "current epoch %d, last committed %d, monitor CPU %.3f%% of the machine in the last epoch (%s)\n",
		s.CurrentEpoch, s.LastCommitted, s.MonitorCPU, budget)
	if s.StorageBudget > 0 {
		fmt.Fprintf(w, "storage budget %s a day for samples and stacks: %s in the bank, %s spent since the start (CAPPED: the samples it did not keep)\n",
			megabytes(s.StorageBudget), megabytes(s.StorageBank), megabytes(s.StorageSpent))
	}
	if h := s.Storage; h != nil && h.State != "ok" {
		fmt.Fprintf(w, "STORAGE FAILING since %s (%s): %s\n", h.Since.Format("2006-01-02 15:04:05 UTC"), h.Fault, h.LastError)
		fmt.Fprintf(w, "  %d epochs held in memory until the store takes them; OTLP exports are answered 503 and retried\n", s.HeldEpochs)
	}
	if h := s.Storage; h != nil && h.Faults > 0 {
		fmt.Fprintf(w, "storage faults since the recorder started: %d, %d writes failed in them\n", h.Faults, h.FailedWrites)
	}
	if s.SkippedEpochs > 0 {
		fmt.Fprintf(w, "epochs that could not be committed, dropped (see the recorder's log): %d\n", s.SkippedEpochs)
	}
	if s.LateSamples > 0 {
		fmt.Fprintf(w, "samples dropped for arriving after their epoch closed: %d\n", s.LateSamples)
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	unstored := false
	for _, v := range s.Vitals {
		unstored = unstored || v.UnstoredSamples > 0 || v.UnstoredEvents > 0
	}
	if unstored {
		fmt.Fprintln(w, "events and samples in the dropped epochs, by vital:")
		for _, v := range s.Vitals {
			if v.UnstoredSamples > 0 || v.UnstoredEvents > 0 {
				fmt.Fprintf(w, "  %-8s %d events, %d samples\n", v.Name, v.UnstoredEvents, v.UnstoredSamples)
			}
		}
	}
	fmt.Fprintln(tw, "VITAL\tSTATE\tTHRESHOLD\tEVENTS\tSAMPLES\tCAPPED\tLOST\tDETAIL")
	for _, v := range s.Vitals {
		detail := v.Trigger
		if v.Reason != "" {
			detail = v.Reason
		}
		t := "-"
		if v.Threshold > 0 {
			t = fmt.Sprint(v.Threshold)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", v.Name, v.State, t, v.Events, v.Samples, v.Capped, v.Lost, detail)
	}
	tw.Flush()
	var sketchBytes, otherBytes uint64
	var others []string
	for _, m := range s.KernelMemory {
		if m.Sketch {
			sketchBytes += m.Bytes
		} else {
			otherBytes += m.Bytes
			others = append(others, fmt.Sprintf("%s %d KiB", m.Map, m.Bytes/1024))
		}
	}
	fmt.Fprintf(w, "kernel memory: sketch maps %d KiB; other maps %d KiB (%s)\n",
		sketchBytes/1024, otherBytes/1024, strings.Join(others, ", "))
	if x := s.Export; x != nil {
		state := "connected to ClickHouse " + x.Server
		if !x.Connected {
			state = "not connected"
		}
		fmt.Fprintf(w, "export to %s (database %s): %s; shipped %d batches, %d rows, through epoch %d; spool %d batches, %d of %d KiB\n",
			x.URL, x.Database, state, x.ShippedBatches, x.ShippedRows, x.LastShippedEpoch, x.SpooledBatches, x.SpooledBytes/1024, x.SpoolLimit/1024)
		if x.DroppedBatches > 0 {
			fmt.Fprintf(w, "export: spool full, dropped %d batches (%d rows), oldest first\n", x.DroppedBatches, x.DroppedRows)
		}
		if x.LastError != "" {
			fmt.Fprintf(w, "export: last error at %s: %s\n", x.LastErrorAt.Format("15:04:05"), x.LastError)
		}
	}
	if r := s.Requests; r != nil {
		printRequestsStatus(w, r)
	}
}

func printRequestsStatus(w io.Writer, r *requestsStatus) {
	if o := r.OTLP; o != nil {
		fmt.Fprintf(w, "OTLP: %d exports, %d spans stored in %d commits, %d spans rejected, %d exports refused while overloaded, %d spans waiting to commit\n",
			o.Requests, o.SpansAccepted, o.Commits, o.SpansRejected, o.Refused, o.QueuedSpans)
		if o.CommitErrors > 0 {
			fmt.Fprintf(w, "OTLP: %d commits failed (the exporters were told to retry; see the recorder's log)\n", o.CommitErrors)
		}
		if o.ConnectionsRefused > 0 {
			fmt.Fprintf(w, "OTLP: %d connections over the limit refused (HTTP answered 503, the exporters retry)\n", o.ConnectionsRefused)
		}
		if u := o.LastUnattributed; o.SpansUnattributed > 0 && u != nil {
			from := ""
			if u.Sender != nil {
				from = ", sent by " + u.Sender.String()
			}
			fmt.Fprintf(w, "OTLP: %d spans are not accounted: they carry no %s (the last from service %s%s);\n%s\n",
				o.SpansUnattributed, u.Missing, u.Service, from, otlp.AttributionFix)
		}
	}
	if a := r.Accounting; a != nil {
		attached := "attached"
		if !a.Attached {
			attached = "not attached (no process to account)"
		}
		fmt.Fprintf(w, "kernel accounting: %s; %d processes (%d from their exec, %d exec rules), %d records, %d intervals committed, %d dropped (of threads no span named)\n",
			attached, a.Tracked, a.FromExec, a.Rules, a.Records, a.Committed, a.Dropped)
		if a.Unstored > 0 {
			fmt.Fprintf(w, "kernel accounting: %d intervals the store could not take (a storage fault), dropped\n", a.Unstored)
		}
		if a.Lost > 0 || a.IOLost > 0 || a.Refused > 0 {
			fmt.Fprintf(w, "kernel accounting: %d records lost (ring buffer full), %d block requests not followed (in-flight map full), %d processes not tracked (tracked map full): spans of their threads are charged less than they used\n",
				a.Lost, a.IOLost, a.Refused)
		}
	}
}

func runVitals(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("vitals", stderr)
	af := addAgentFlags(fs)
	enable := valueFlag(fs, "enable", "", "comma-separated vitals to start recording", vitalList("none"))
	disable := valueFlag(fs, "disable", "", "comma-separated vitals to stop recording", vitalList("none"))
	if err := parse(fs, args); err != nil {
		return err
	}
	c, ok := af.agent()
	if !ok {
		return fmt.Errorf("no recorder is running for %s", *af.data)
	}
	ctx := context.Background()
	st, err := c.status(ctx)
	for _, change := range []struct {
		list []recorder.Vital
		on   bool
	}{{*disable, false}, {*enable, true}} {
		for _, v := range change.list {
			if err == nil {
				st, err = c.setVital(ctx, v.String(), change.on)
			}
		}
	}
	if err != nil {
		return err
	}
	printStatus(stdout, st)
	return nil
}

// megabytes writes n bytes in MB, to the kilobyte.
func megabytes(n int64) string { return fmt.Sprintf("%.3f MB", float64(n)/1e6) }
