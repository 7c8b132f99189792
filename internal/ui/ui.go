// Package ui is holter's web UI: the bundle built from ui/ (TypeScript,
// see ui/README.md) into dist/, committed like the BPF objects so that
// `go build` needs no node. scripts/check-generated.sh rebuilds it and
// fails when the committed bundle is stale.
package ui

import (
	"embed"
	"io/fs"
)

//go:embed dist
var dist embed.FS

// FS is the UI's files: index.html and what it loads.
func FS() fs.FS {
	sub, err := fs.Sub(dist, "dist")
	if err != nil {
		panic(err) // dist is embedded: it is there
	}
	return sub
}
