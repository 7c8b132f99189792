package main

// The embedded DuckDB is a static C++ library whose bindings link it with
// -rdynamic, which puts its 44,000 symbols into the dynamic symbol table:
// the dynamic loader then searches that table for each of libstdc++'s
// relocations at every start (about a millisecond), and the table's 6 MB
// of pages stay resident. Nothing loads code that binds to holter's
// symbols (no DuckDB extension is loaded at run time: the ones holter
// uses are linked in), so none is exported.

// #cgo LDFLAGS: -Wl,--no-export-dynamic
import "C"
