// SPDX-License-Identifier: GPL-2.0
/*
 * The recorder's vital-sign programs: one translation unit, so every
 * program shares the control, HCA, stats and sample maps. Each program
 * family lives in its own header; user space loads and attaches each
 * program on its own, so a vital the kernel cannot support is reported
 * unsupported without taking the others down.
 */
#include "sketch.h"
#include <bpf/bpf_endian.h>
#include "cpu.bpf.h"
#include "sched.bpf.h"
#include "blio.bpf.h"
#include "mem.bpf.h"
#include "syscall.bpf.h"
#include "signal.bpf.h"
#include "sock.bpf.h"
#include "lock.bpf.h"

/* Keeps the sample layout in BTF so bpf2go generates its Go type. */
struct hl_sample *unused_hl_sample __attribute__((unused));

char LICENSE[] SEC("license") = "GPL";
