package symbol

import "fmt"

// Frame is one resolved stack frame. Func is "" when the address could not be resolved; Module is the
// kernel module name ("vmlinux" for the core kernel), or the path of the mapped file for user frames,
// or "" if unknown.
type Frame struct {
	Addr   uint64
	Func   string
	Offset uint64 // Addr - symbol start, when Func != ""
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
