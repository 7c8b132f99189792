package server

import (
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/holter-dev/holter/internal/storetest"
)

// BenchmarkDayOfRecording times the API on a store holding a day at the
// defaults: 1440 one-minute epochs of every vital, 400 samples each,
// written through store.WriteEpoch (so the rollups are the recorder's).
// The aims are under 200 ms for a day of vitals at 5-minute resolution
// and for an hour at epoch resolution. Run with
//
//	go test -run XXX -bench DayOfRecording -benchtime 20x ./internal/server/
func BenchmarkDayOfRecording(b *testing.B) {
	st := storetest.Open(b)
	began := time.Now()
	day := synthetic{host: "h", startNs: synthStart, epoch: time.Minute, epochs: 1440, samplesPerEpoc: 400}
	day.write(b, st)
	b.Logf("wrote a day (%d epochs, %d samples) in %v", day.epochs, day.epochs*day.samplesPerEpoc, time.Since(began).Round(time.Second))
	base := startServer(b, Options{Store: st})
	end := synthStart + int64(24*time.Hour)
	hour := end - int64(time.Hour)
	epoch := fmt.Sprintf("from=%d&to=%d", hour, hour+int64(time.Minute))
	for _, c := range []struct{ name, path string }{
		{"day_of_vitals_at_5m", fmt.Sprintf("/api/vitals?from=%d&to=%d", synthStart, end)},
		{"hour_of_vitals_at_epoch", fmt.Sprintf("/api/vitals?from=%d&to=%d", hour, end)},
		{"overview", "/api/overview"},
		{"epoch_samples", "/api/samples?" + epoch},
		{"hour_cpu_flame", fmt.Sprintf("/api/flame?from=%d&to=%d&vital=cpu", hour, end)},
		{"hour_top_sites", fmt.Sprintf("/api/top?from=%d&to=%d&vital=cpu&by=site", hour, end)},
		{"day_samples_by_func", fmt.Sprintf("/api/samples?from=%d&to=%d&func=leaf_7", synthStart, end)},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				resp, err := http.Get(base + c.path)
				if err != nil {
					b.Fatal(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != 200 {
					b.Fatalf("%s: %d", c.path, resp.StatusCode)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N)/1000, "ms/req")
		})
	}
}
