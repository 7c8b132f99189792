// Package recorder is holter's always-on collector of vital signs
// (Chopstix, OSDI 2008, §4.1).
//
// Each vital sign is an event stream from the kernel — perf-event samples
// for cpu, the context-switch path for sched and blck, the block layer for
// blio. A BPF program per trigger labels each event, adds its weight to the
// vital's hash counter array (bpf/sketch.h, twin in internal/sketch) and
// samples it, with stacks, when the label's estimated count crosses the next
// power of the threshold. Every epoch the recorder bumps the epoch
// generation — which makes the BPF side switch to the other copy of every
// HCA and total — drains the sample ring buffer, reads and clears the
// finished copy, symbolizes the samples and hands the epoch to a sink (the
// store) that commits it as one transaction. The samples an epoch keeps
// are bounded by a budget of stored bytes a day (Config.StorageBudget,
// cap.go): over it, labels' first samples are kept first and the rest
// sampled more coarsely; what is dropped goes before it is symbolized, and
// is counted per vital.
package recorder
