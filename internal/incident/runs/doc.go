// Package runs is holter's run catalog: executions of a command measured
// while the recorder records (holter run), and their reference-driven
// analysis (Shen et al., SIGMETRICS 2009): the runs whose performance
// deviates from their references' more than the catalog's change profiles
// expect, each with the low-level metrics of its processes that differ
// most from its reference's (holter runs, internal/diagnose for the
// statistics, internal/findings for the metrics).
package runs
