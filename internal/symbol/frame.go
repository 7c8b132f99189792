package symbol

import (
	"fmt"
	"strings"
)

// Frame is one resolved stack frame. Func is "" when the address could not be resolved; Module is the
// kernel module name ("vmlinux" for the core kernel), or the path of the mapped file for user frames,
// or "" if unknown.
type Frame struct {
	Addr   uint64
	Func   string
	Offset uint64 // Addr - symbol start, when Func != ""; else, in a file Module, the address's offset in the file
	Module string
}

// String formats the frame as "func+0x1a [module]" when resolved, "0x7f12.. [module]" when only the
// module is known and "0x7f12.. [unknown]" otherwise. Modules that are already bracketed pseudo names
// such as "[vdso]" are not bracketed twice.
func (f Frame) String() string {
	mod := f.Module
	switch {
	case mod == "":
		mod = "[unknown]"
	case len(mod) < 2 || mod[0] != '[' || mod[len(mod)-1] != ']':
		mod = "[" + mod + "]"
	}
	if f.Func != "" {
		return fmt.Sprintf("%s+0x%x %s", f.Func, f.Offset, mod)
	}
	return fmt.Sprintf("0x%x %s", f.Addr, mod)
}

// Named tells whether a stored frame's text names a function: not an
// address ("0x7f12…"), "[unknown]", or a place in a file or a program
// without a symbol ("libc.so.6+0x1a2b", "[exe]+0x1a2b", "[mmap]-0x1a2b":
// internal/recorder's userFrames).
func Named(frame string) bool {
	return frame != "" && frame != "[unknown]" && !strings.HasPrefix(frame, "0x") &&
		!strings.Contains(frame, "+0x") && !strings.HasPrefix(frame, "[mmap]-0x")
}
