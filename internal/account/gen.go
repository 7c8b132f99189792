package account

// The accounting programs are C (bpf/account.bpf.c), compiled by clang
// through bpf2go into the committed account_x86_bpfel.{go,o}, so building
// holter needs no clang. CI runs go generate again and fails on a diff.
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target amd64 -type acct_event -type acct_stats account ../../bpf/account.bpf.c -- -I../../bpf
