// Package sysname names the kernel's numbers as people read them: x86-64
// system calls (read, getrandom), error numbers (ENOENT) and signals
// (SIGKILL). It is the project's one table of system calls, generated from
// golang.org/x/sys's (go generate); the recorder stores numbers, and
// whatever shows them to a person — holter trace, findings, holter diff,
// the API's samples — names them here. holter records x86-64 hosts.
package sysname
