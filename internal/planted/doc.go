// Package planted makes incidents to plant on a host while holter records
// it, to measure whether holter's findings name their cause: for each
// class (a busy loop, a memory leak in user space or in the kernel, lock
// contention, a thread starved of CPU, a loop around a failing system
// call, a stalled disk, a slow network peer, a storm of signals) a small C
// program, written anew for each incident with a made-up name for the
// function the problem is in (the culprit) and drawn timing and intensity,
// so that a measurement over many incidents measures the method rather
// than a tuning to one program. bench/incidents runs them among background
// work and reports the rank of the first incident naming each culprit;
// cmd/holter's tests plant a few.
//
// The programs call the system through a small function of their own
// rather than from the culprit itself: frame-pointer unwinding (the
// recorder's) loses the caller of a C library function that keeps no frame
// pointer, so the culprit is the frame above that wrapper.
package planted
