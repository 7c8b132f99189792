#!/usr/bin/env bash
# Regenerates the BPF objects from bpf/ with clang and the web UI's bundle
# from ui/ with esbuild, and fails if the committed ones differ: the
# committed files are what `go build` uses.
set -euo pipefail
cd "$(dirname "$0")/.."
gen=(internal/recorder/vitals_x86_bpfel.go internal/recorder/vitals_x86_bpfel.o
	internal/account/account_x86_bpfel.go internal/account/account_x86_bpfel.o)
before=$(mktemp -d)
trap 'rm -rf "$before"' EXIT
cp "${gen[@]}" "$before/"
go generate ./internal/recorder/ ./internal/account/
for f in "${gen[@]}"; do
	if ! cmp -s "$f" "$before/$(basename "$f")"; then
		echo "check-generated: $f is stale: it differs from what bpf/ compiles to (now regenerated; commit it)" >&2
		exit 1
	fi
done
echo "check-generated: BPF objects match their sources"

dist=internal/ui/dist
cp -r "$dist" "$before/dist"
(cd ui && npm run --silent build)
if ! diff -r "$before/dist" "$dist" >/dev/null; then
	echo "check-generated: $dist is stale: it differs from what ui/ builds to (now rebuilt; commit it)" >&2
	exit 1
fi
echo "check-generated: UI bundle matches its sources"
