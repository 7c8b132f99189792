package recorder

// The vital-sign programs are C (bpf/), compiled by clang through bpf2go into
// the committed vitals_x86_bpfel.{go,o}, so building holter needs no clang.
// CI runs go generate again and fails if the committed files differ.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target amd64 -type hl_sample -type hl_stats vitals ../../bpf/vitals.bpf.c -- -I../../bpf
