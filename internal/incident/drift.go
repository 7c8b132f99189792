package incident

import (
	"fmt"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/diagnose"
	"github.com/holter-dev/holter/internal/findings"
)

// DriftScore is the least score (EMD beyond the reference's own variation,
// diagnose.RankOptions.Denoise) of the top metric that makes a drift. An
// idle machine's bursts and heavy-tailed latencies move as much within the
// reference as across it and score near 0; a workload that starts or stops
// scores near 1 in the rates it changes.
const DriftScore = 0.5

// Drift is the finding that a target range's low-level metrics (those of
// holter diff) differ from a reference's, with the top metrics of the
// ranking as its evidence; rule is findings.DriftRule or
// findings.DiffRule. Its resource is the top metric's vital's, so that it
// joins the incident about that resource; a drift has no severity of its
// own, as the metrics say what moved, not what it costs.
func Drift(rule string, target, ref findings.Range, ranked []diagnose.Ranked) *findings.Finding {
	top := ranked[0]
	f := &findings.Finding{Rule: rule, Timescale: findings.Epoch, Subject: top.Name,
		StartNs: target.StartNs, EndNs: target.EndNs, Score: top.Score, Resource: metricResource(top.Name),
		Summary: fmt.Sprintf("%s to %s differs from the %s before it most in %s (EMD %.2f, %.2f between the halves of the reference; mean %.4g against %.4g)",
			fmtNs(target.StartNs), fmtNs(target.EndNs), time.Duration(ref.EndNs-ref.StartNs).Round(time.Second),
			top.Name, top.EMD, top.Noise, top.TargetMean, top.ReferenceMean)}
	for i, r := range ranked {
		if i == 5 {
			break
		}
		f.Evidence = append(f.Evidence, findings.Evidence{Name: r.Name, Value: r.TargetMean, Against: r.ReferenceMean,
			Relation: fmt.Sprintf("score %.3f: EMD %.3f, %.3f within the reference", r.Score, r.EMD, r.Noise)})
	}
	return f
}

// metricResource is the resource of the vital a diff metric is about.
func metricResource(name string) string {
	for _, w := range strings.FieldsFunc(name, func(r rune) bool { return r == ' ' || r == '(' || r == ')' }) {
		for _, v := range findings.Vitals {
			if w == v {
				return findings.VitalResource(v)
			}
		}
	}
	switch {
	case strings.Contains(name, "block"):
		return findings.ResourceDisk
	case strings.Contains(name, "system call"):
		return findings.ResourceSyscall
	}
	return "metrics"
}
