#!/usr/bin/env bash
# Installs what building and testing holter needs on a fresh Debian machine:
# a C compiler for DuckDB's cgo bindings and the workloads the tests run,
# clang/llvm and libbpf headers to regenerate the BPF objects, node and npm
# to build the web UI (ui/) and Chromium to test it in. Idempotent:
# installs only what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v gcc >/dev/null || need+=(gcc)
command -v clang >/dev/null || need+=(clang)
command -v llvm-strip >/dev/null || need+=(llvm)
[ -f /usr/include/bpf/bpf_helpers.h ] || need+=(libbpf-dev)
command -v git >/dev/null || need+=(git)
command -v readelf >/dev/null || need+=(binutils) # readelf: the reference for the unwind tables internal/symbol reads
command -v stress-ng >/dev/null || need+=(stress-ng)
command -v node >/dev/null || need+=(nodejs)
command -v npm >/dev/null || need+=(npm)
command -v chromium >/dev/null || need+=(chromium)
command -v bpftrace >/dev/null || need+=(bpftrace) # reference for holter trace's agreement tests and benchmarks
command -v clickhouse-server >/dev/null || need+=(clickhouse-server) # the fleet store the export and fleet tests ship to
command -v promtool >/dev/null || need+=(prometheus) # promtool checks /metrics in the tests
command -v zsh >/dev/null || need+=(zsh) # holter completion zsh and fish are tried in their shells
command -v fish >/dev/null || need+=(fish)
command -v ip >/dev/null || need+=(iproute2) # network namespaces as separate hosts in the fleet tests
[ -f /usr/include/x86_64-linux-gnu/sys/sdt.h ] || [ -f /usr/include/sys/sdt.h ] || need+=(systemtap-sdt-dev) # <sys/sdt.h>: static markers in the USDT workload of holter trace's tests

if ((${#need[@]})); then
	echo "setup: installing ${need[*]}" >&2
	sudo=""
	if [ "$(id -u)" != 0 ]; then
		command -v sudo >/dev/null || { echo "setup: need root (or sudo) to apt-get install ${need[*]}" >&2; exit 1; }
		sudo=sudo
	fi
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# The UI's build and test tools (esbuild, tsc, playwright-core), pinned by
# ui/package-lock.json; reinstalled only when the lock file changed.
stamp=ui/node_modules/.holter-lock
if ! cmp -s ui/package-lock.json "$stamp" 2>/dev/null; then
	echo "setup: npm ci in ui/" >&2
	(cd ui && npm ci --no-audit --no-fund --loglevel=error)
	cp ui/package-lock.json "$stamp"
fi
command -v go >/dev/null || { echo "setup: the Go toolchain (go.mod's version) must be on PATH" >&2; exit 1; }
