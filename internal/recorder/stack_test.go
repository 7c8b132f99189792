package recorder

import (
	"slices"
	"testing"

	"github.com/holter-dev/holter/internal/symbol"
)

// TestUserStackSurvivesASLR: the same code in two processes of a program,
// loaded at other addresses, is one stack, whether its frames were found
// in a file without symbols or only placed against the program's layout
// after the process was gone; a frame-pointer walk into garbage stops
// there; named frames keep their names.
func TestUserStackSurvivesASLR(t *testing.T) {
	frames := func(base, mmap uint64) ([]symbol.Frame, symbol.Image) {
		return []symbol.Frame{
			{Addr: mmap - 0x1f000 + 0x120, Module: "/usr/lib/x86_64-linux-gnu/libz.so.1", Offset: 0x2120},
			{Addr: base + 0x4410, Func: "main", Offset: 0x10, Module: "/usr/bin/prog"},
			{Addr: base + 0x8888}, // mapping unknown: the process is gone
			{Addr: mmap - 0x340000},
			{Addr: 0x1},           // garbage: the walk ends here
			{Addr: base + 0x4410}, // never reached
		}, symbol.Image{StartCode: base, MmapBase: mmap}
	}
	a := userFrames(frames(0x55d000000000, 0x7f1200000000))
	b := userFrames(frames(0x563400000000, 0x7fa900000000))
	want := []string{"libz.so.1+0x2120", "main", "[exe]+0x8888", "[mmap]-0x340000"}
	if !slices.Equal(a.Frames, want) || len(a.Modules) != len(want) {
		t.Errorf("frames %q (modules %q), want %q", a.Frames, a.Modules, want)
	}
	if a.ID != b.ID || !slices.Equal(a.Frames, b.Frames) {
		t.Errorf("one program's code at two load addresses: stacks %x %q and %x %q", a.ID, a.Frames, b.ID, b.Frames)
	}
	for _, f := range want {
		if symbol.Named(f) != (f == "main") {
			t.Errorf("symbol.Named(%q) = %v", f, symbol.Named(f))
		}
	}
}
