// Package metrics writes Prometheus text (exposition format 0.0.4): the
// family and sample syntax every /metrics writer shares (Writer), and the
// host's vitals as a running recorder commits them (Vitals): counters
// since the recorder started of each vital's events, weight in base units
// (seconds, bytes, pages), samples and lost samples; the last epoch's rates
// as gauges (CPU in cores); histograms of the sampled delays; and the
// recorder's own CPU, memory, budget and each vital's state.
//
// The delay histograms count the sketch's samples, not every event: each
// label is sampled as its count crosses powers of the threshold, so rare
// delays weigh more there than among all events. The exact totals are the
// _total counters.
package metrics
