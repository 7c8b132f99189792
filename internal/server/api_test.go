package server

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/store"
)

// synthStart is 2024-03-01 00:00 UTC: epochs of 1 minute from there.
const synthStart = int64(1709251200) * 1e9

// startSynth serves a synthetic recording of 30 one-minute epochs.
func startSynth(t *testing.T) string {
	t.Helper()
	return startServer(t, Options{Store: synthStore(t)})
}

// synthStore is a store holding the synthetic recording of startSynth.
func synthStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	synthetic{host: "h", startNs: synthStart, epoch: time.Minute, epochs: 30, samplesPerEpoc: 66}.write(t, st)
	return st
}

func fetch(t *testing.T, url string, out any) int {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("GET %s: %d, body is not JSON: %q", url, resp.StatusCode, b)
	}
	return resp.StatusCode
}

func minute(n int) int64 { return synthStart + int64(n)*int64(time.Minute) }

func rangeQ(from, to int) string { return fmt.Sprintf("from=%d&to=%d", minute(from), minute(to)) }

func TestOverview(t *testing.T) {
	base := startSynth(t)
	var ov Overview
	if code := fetch(t, base+"/api/overview", &ov); code != 200 {
		t.Fatalf("status %d", code)
	}
	if ov.Host != "h" || ov.Epochs != 30 || ov.FirstNs != synthStart || ov.LastNs != minute(30) ||
		ov.EpochNs != int64(time.Minute) || ov.Live || len(ov.Vitals) != len(vitalNames()) || len(ov.Timescales) != 4 {
		t.Errorf("overview %+v", ov)
	}
}

func TestVitalsTimescales(t *testing.T) {
	base := startSynth(t)
	cases := []struct {
		query     string
		timescale string
		points    int
		weight0   float64 // cpu's first point
	}{
		{rangeQ(0, 30) + "&vital=cpu,blck", "epoch", 30, 1000},
		{rangeQ(10, 12) + "&vital=cpu,blck", "epoch", 2, 1010},
		// 5-minute buckets sum their epochs: 1000+1001+...+1004.
		{rangeQ(0, 30) + "&vital=cpu,blck&timescale=5m", "5m", 6, 5010},
		{rangeQ(0, 30) + "&vital=cpu,blck&timescale=1h", "1h", 1, 30*1000 + 435},
		// A year at most 1000 points a series: the 1-day rollups.
		{fmt.Sprintf("from=%d&to=%d&vital=cpu,blck", synthStart, synthStart+int64(365*24*time.Hour)), "1d", 1, 30*1000 + 435},
	}
	for _, c := range cases {
		t.Run(c.query, func(t *testing.T) {
			var ans VitalsAnswer
			if code := fetch(t, base+"/api/vitals?"+c.query, &ans); code != 200 {
				t.Fatalf("status %d", code)
			}
			if ans.Timescale != c.timescale || len(ans.Series) != 2 || ans.Series[0].Vital != "cpu" {
				t.Fatalf("answer %+v", ans)
			}
			s := ans.Series[0]
			if len(s.T) != c.points || s.Weight[0] != c.weight0 || len(s.Seconds) != c.points {
				t.Errorf("cpu series: %d points (want %d), first weight %v (want %v)", len(s.T), c.points, s.Weight, c.weight0)
			}
			if s.Seconds[0] <= 0 {
				t.Errorf("seconds %v", s.Seconds)
			}
		})
	}
}

func TestSamplesAndStacks(t *testing.T) {
	base := startSynth(t)
	var all SamplesAnswer
	fetch(t, base+"/api/samples?"+rangeQ(3, 4), &all)
	if all.Total != 66 || len(all.Samples) != 66 || all.Samples[0].Epoch != 4 {
		t.Fatalf("one epoch's samples: total %d, %d given", all.Total, len(all.Samples))
	}
	var cpu SamplesAnswer
	fetch(t, base+"/api/samples?"+rangeQ(3, 5)+"&vital=cpu&comm=spin&limit=3&order=weight", &cpu)
	if cpu.Total != 4 || len(cpu.Samples) != 3 {
		t.Fatalf("filtered: %+v", cpu)
	}
	for i, s := range cpu.Samples {
		if s.Vital != "cpu" || s.Comm != "spinner" || s.Fields["ip"] == nil || s.Fields["delay_ns"] != nil {
			t.Errorf("sample %+v", s)
		}
		if i > 0 && s.Weight > cpu.Samples[i-1].Weight {
			t.Errorf("not ordered by weight")
		}
	}
	var byFunc SamplesAnswer
	fetch(t, base+"/api/samples?"+rangeQ(0, 30)+"&func=leaf_7&pid=300&uid=1000&exe=app", &byFunc)
	if byFunc.Total == 0 {
		t.Fatal("no sample with leaf_7 in pid 300")
	}
	s := byFunc.Samples[0]
	var stacks struct{ Stacks []Stack }
	fetch(t, base+"/api/stacks?id="+*s.UStackID+"&id="+*s.KStackID, &stacks)
	if len(stacks.Stacks) != 2 {
		t.Fatalf("stacks %+v", stacks)
	}
	for _, st := range stacks.Stacks {
		switch st.Kind {
		case "user":
			if st.Frames[0] != "leaf_7" || st.Frames[2] != "main" {
				t.Errorf("user stack %v", st.Frames)
			}
		case "kernel":
			if st.ID != *s.KStackID || !strings.HasPrefix(st.ID, "92233720368547") {
				t.Errorf("kernel stack id %s, sample says %s: 64-bit ids must survive JSON", st.ID, *s.KStackID)
			}
		}
	}
	var empty SamplesAnswer
	fetch(t, base+"/api/samples?from=1&to=2", &empty)
	if empty.Total != 0 || empty.Samples == nil {
		t.Errorf("range without epochs: %+v", empty)
	}
}

func TestFlameAndTop(t *testing.T) {
	base := startSynth(t)
	var fl FlameAnswer
	fetch(t, base+"/api/flame?"+rangeQ(0, 10)+"&vital=cpu&comm=spinner", &fl)
	if fl.Total == 0 || len(fl.Stacks) == 0 || fl.BaseTotal != 0 {
		t.Fatalf("flame %+v", fl)
	}
	var sum float64
	for _, s := range fl.Stacks {
		sum += s.Weight
		if s.Frames[0] != "spinner" || s.Frames[1] != "main" || !strings.HasSuffix(s.Frames[len(s.Frames)-1], " [k]") {
			t.Errorf("folded stack %v: want comm, user root first, kernel leaf last", s.Frames)
		}
	}
	if sum != fl.Total {
		t.Errorf("stacks sum to %v, total %v", sum, fl.Total)
	}
	var diff FlameAnswer
	fetch(t, base+"/api/flame?"+rangeQ(0, 10)+"&vital=cpu&base_from="+fmt.Sprint(minute(10))+"&base_to="+fmt.Sprint(minute(20)), &diff)
	if diff.Total == 0 || diff.BaseTotal == 0 {
		t.Errorf("differential flame: %v / %v", diff.Total, diff.BaseTotal)
	}

	for _, by := range []string{"comm", "exe", "pid", "uid", "site", "ksite"} {
		var top TopAnswer
		fetch(t, base+"/api/top?"+rangeQ(0, 30)+"&vital=blck&limit=3&by="+by, &top)
		if len(top.Rows) == 0 || len(top.Rows) > 3 || top.TotalWeight < top.Rows[0].Weight || top.By != by {
			t.Errorf("top by %s: %+v", by, top)
		}
		if by == "site" && !strings.HasPrefix(top.Rows[0].Key, "leaf_") {
			t.Errorf("top site %q, want a user leaf", top.Rows[0].Key)
		}
	}
}

// TestBadParameters: every endpoint answers a mistake with a 4xx that
// names it, never a 500.
func TestBadParameters(t *testing.T) {
	base := startSynth(t)
	r := rangeQ(0, 30)
	cases := []badCase{
		{"/api/overview?host=nowhere", 404, `nothing recorded for host "nowhere"`},
		{"/api/overview?hots=h", 400, `unknown parameter "hots"`},
		{"/api/vitals", 400, "from and to are required"},
		{"/api/vitals?from=abc&to=5", 400, `from: "abc" is not an integer`},
		{"/api/vitals?from=-5&to=5", 400, "from:"},
		{"/api/vitals?from=9&to=5", 400, "must be before to"},
		{"/api/vitals?from=99999999999999999999&to=5", 400, "from:"},
		{"/api/vitals?" + r + "&timescale=2m", 400, `timescale: "2m" is not one of auto, epoch, 5m, 1h, 1d`},
		{"/api/vitals?" + r + "&vital=cpu,heart", 400, `unknown vital "heart"`},
		{"/api/vitals?" + r + "&from=1", 400, "given 2 times"},
		{"/api/samples?" + r + "&pid=-1", 400, "pid:"},
		{"/api/samples?" + r + "&uid=x", 400, "uid:"},
		{"/api/samples?" + r + "&limit=0", 400, "limit:"},
		{"/api/samples?" + r + "&limit=100000", 400, "limit:"},
		{"/api/samples?" + r + "&order=random", 400, "order:"},
		{"/api/samples?" + r + "&comm=" + strings.Repeat("x", 300), 400, "comm: longer than"},
		{"/api/samples?" + r + "&comm=%27%3B%20DROP%20TABLE%20samples", 200, ""},
		{"/api/stacks", 400, "id is required"},
		{"/api/stacks?id=12x", 400, `"12x" is not a stack id`},
		{"/api/stacks?id=-1", 400, "not a stack id"},
		{"/api/flame?" + r, 400, "vital is required"},
		{"/api/flame?" + r + "&vital=cpu&base_from=5", 400, "base_from and base_to are required"},
		{"/api/flame?" + r + "&vital=cpu&base_from=9&base_to=5", 400, "must be before"},
		{"/api/top?" + r + "&vital=cpu&by=function", 400, `by: "function" is not one of`},
		{"/api/top?" + r + "&vital=cpu&limit=1000", 400, "limit:"},
		{"/api/top?" + r, 400, "vital is required"},
		{"/api/nothing", 404, "no endpoint /api/nothing"},
	}
	checkAnswers(t, base, cases)
}

// badCase is a request and the status and error (a part of it) it gets.
type badCase struct {
	path string
	code int
	want string
}

func checkAnswers(t *testing.T, base string, cases []badCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.path, func(t *testing.T) {
			var body map[string]any
			code := fetch(t, base+c.path, &body)
			if code != c.code {
				t.Fatalf("status %d, want %d: %v", code, c.code, body)
			}
			if c.want != "" {
				if msg, _ := body["error"].(string); !strings.Contains(msg, c.want) {
					t.Errorf("error %q lacks %q", msg, c.want)
				}
			}
		})
	}
}

func TestOpenAPIAndUI(t *testing.T) {
	base := startSynth(t)
	for _, c := range []struct{ path, want string }{
		{"/api/openapi.yaml", "openapi: 3"},
		{"/", "<title>holter</title>"},
	} {
		resp, err := http.Get(base + c.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(b), c.want) {
			t.Errorf("GET %s: %d %.200q", c.path, resp.StatusCode, b)
		}
	}
	// Every endpoint is documented.
	for _, path := range []string{"status", "vitals/{name}", "boost/{pid}", "query", "export/parquet", "trace", "overview", "vitals", "samples", "stacks", "flame", "top", "openapi.yaml"} {
		if !strings.Contains(string(openAPI), "\n  /api/"+path+":\n") {
			t.Errorf("openapi.yaml does not describe /api/%s", path)
		}
	}
}
