// Package pprof writes folded stacks as other profilers' tools read them:
// the pprof profile (profile.proto, gzip'd; go tool pprof, Pyroscope,
// Parca) and Brendan Gregg's folded text (flamegraph.pl, speedscope).
//
// holter's stacks are symbolized when sampled and stored as frame names
// with their modules, without addresses: each distinct (module, frame) is
// one pprof location with one function, address 0, in the mapping of its
// module, which carries the module's build id; the mappings say
// has_functions, so no tool tries to symbolize them again.
package pprof
