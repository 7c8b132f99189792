// Package incident answers "what is wrong with this host?" for a time
// range: one ranked list of incidents, each a problem with its culprit
// (process, executable, function, top user and kernel frames), the
// resource it is about, what it costs (its severity, on the one scale of
// findings.Finding.Severity), a one-line summary, its evidence and the
// commands that look closer. holter findings prints it, GET /api/findings
// answers it and the UI's Findings tab shows it.
//
// It is the top of the package tree that goes from recorded data to ranked
// incidents:
//
//   - internal/diagnose: the statistics — earth mover's distance ranking
//     of metrics, change profiles and their synthesis (Shen et al.).
//   - internal/findings: windows of recorded vitals and samples, the
//     filters (rules, detectors, EWMA) that turn them into findings, and
//     the low-level metrics holter diff ranks.
//   - internal/incident (this package): Merge joins findings about the
//     same culprit close in time into incidents and ranks them, what is
//     new against the host's History before the range first; Build
//     reports on a range from the findings the recorder's online analysis
//     stored and the filters evaluated over what it has not analysed;
//     Online is that analysis, run in the recorder on every epoch it
//     commits, incrementally: each epoch is read once; Drift turns a
//     holter diff ranking into a finding, so the diff's moved metrics and
//     the online drift check are evidence in the same list.
//   - internal/incident/runs: the run catalog (holter run, holter runs).
//
// cmd/holter, the API server and the recorder only call it.
package incident
