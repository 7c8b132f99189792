package recorder

import (
	"encoding/binary"
	"slices"

	"github.com/holter-dev/holter/internal/symbol"
)

// longestCall is the length of the longest call instruction afterCall
// knows: ff /2 with a SIB byte and a 32-bit displacement.
const longestCall = 7

// wrapperCaller gives back addrs, the frame-pointer walk of a user stack,
// with frame 0's caller put in as frame 1 when the walk lost it: when
// frame 0 returns from a system call (the code before it is a syscall
// instruction) in a function that keeps no frame pointer, as the C
// library's wrappers do, the walk went on from the caller's frame pointer
// to the caller's caller, or stopped when the wrapper had the frame
// pointer's register in use. words are the words at the stack pointer
// then (struct hl_sample in bpf/sketch.h); the caller's return address is
// the one where the wrapper's call frame information puts it (withCaller),
// or, in a file without it, the first of them that is one (in an
// executable mapping, after a call instruction) and whose call could have
// led to frame 0 (callerAmong), which a stale return address among the
// wrapper's locals can fool.
// The code is read from the mapped files, which serves processes that are
// gone.
func (r *Recorder) wrapperCaller(pid uint32, img symbol.Image, addrs, words []uint64) []uint64 {
	if len(addrs) == 0 || len(words) == 0 {
		return addrs
	}
	code := r.procs.CodeBefore(pid, img, append([]uint64{addrs[0]}, words...), longestCall)
	if !afterSyscall(code[0]) {
		return addrs
	}
	if size, ok := r.procs.FrameSize(pid, img, addrs[0]); ok {
		return withCaller(addrs, words, code[1:], int(size/8)-1)
	}
	var rets, targets []uint64
	for i, w := range words {
		if afterCall(code[i+1]) {
			rets = append(rets, w)
			targets = append(targets, callTarget(w, code[i+1]))
		}
	}
	if len(rets) == 0 {
		return addrs
	}
	fr := r.procs.ResolveImage(pid, img, append([]uint64{addrs[0]}, targets...))
	next := uint64(0)
	if len(addrs) > 1 {
		next = addrs[1]
	}
	if c, ok := callerAmong(rets, fr[0], fr[1:], next); ok {
		return slices.Insert(slices.Clone(addrs), 1, c)
	}
	return addrs
}

// withCaller is wrapperCaller's answer where the wrapper's call frame
// information says its return address is words[at] (code the code before
// each of words): that word, when it follows a call, as frame 1 unless the
// walk has it there already. A mended walk (bpf/sketch.h mend_ustack)
// whose frame 1 is a word below it, inside the wrapper's frame, went on
// from one of the wrapper's locals: it is cut there. A return address
// past the words, or one that follows no call, leaves addrs as they are:
// every word there is the wrapper's own.
func withCaller(addrs, words []uint64, code [][]byte, at int) []uint64 {
	if at < 0 || at >= len(words) || !afterCall(code[at]) {
		return addrs
	}
	c := words[at]
	if len(addrs) > 1 && addrs[1] == c {
		return addrs
	}
	if len(addrs) > 1 {
		if i := slices.Index(words, addrs[1]); i >= 0 && i < at {
			return []uint64{addrs[0], c}
		}
	}
	return slices.Insert(slices.Clone(addrs), 1, c)
}

// calledFrames is addrs, a user stack the programs mended (bpf/sketch.h
// mend_ustack: a walk again from a frame pointer found among the words at
// the stack pointer), up to its first frame past frame 0 that is no return
// address: one that does not follow a call instruction, as a word that
// only looked like a saved frame pointer would give.
func (r *Recorder) calledFrames(pid uint32, img symbol.Image, addrs []uint64) []uint64 {
	if len(addrs) < 2 {
		return addrs
	}
	code := r.procs.CodeBefore(pid, img, addrs[1:], longestCall)
	for i, c := range code {
		if !afterCall(c) {
			return addrs[:i+1]
		}
	}
	return addrs
}

// callerAmong picks frame 0's caller from rets, the return addresses among
// the words at the stack pointer, in order, whose calls went to targets
// (a direct call's target resolved, an indirect call's empty), among those
// before next, the walk's frame 1 already (frame 0's function keeps a
// frame pointer): the first whose direct call went into the program's
// procedure linkage table (no symbol of its own: none, or the one before
// it, _init, at an offset) or to frame 0's function, which leads there
// for sure; failing that, the first through a pointer, which may. A
// direct call to the start of another named function is a return
// address left on the stack by an earlier call, as an indirect one may be
// (a wrapper's locals hold whatever earlier calls left, clock_gettime's
// call into the vDSO among them).
func callerAmong(rets []uint64, frame0 symbol.Frame, targets []symbol.Frame, next uint64) (uint64, bool) {
	var through uint64
	for i, r := range rets {
		if r == next {
			return 0, false
		}
		switch t := targets[i]; {
		case t.Addr == 0:
			if through == 0 {
				through = r
			}
		case t.Func == "" || t.Offset != 0 || t.Func == frame0.Func:
			return r, true
		}
	}
	return through, through != 0
}

// callTarget is where the direct call before return address ret (code
// the bytes before it, as afterCall takes them) goes; 0 for any other.
func callTarget(ret uint64, code []byte) uint64 {
	n := len(code)
	if n < 5 || code[n-5] != 0xe8 {
		return 0
	}
	return ret + uint64(int64(int32(binary.LittleEndian.Uint32(code[n-4:]))))
}

// afterSyscall tells whether code ends with a syscall instruction (0f 05).
func afterSyscall(code []byte) bool {
	n := len(code)
	return n >= 2 && code[n-2] == 0x0f && code[n-1] == 0x05
}

// afterCall tells whether code ends with a call instruction: a direct call
// (e8 rel32), or an indirect one (ff /2) through a register or through
// memory in any of its addressing forms.
func afterCall(code []byte) bool {
	n := len(code)
	if n >= 5 && code[n-5] == 0xe8 {
		return true
	}
	for l := 2; l <= min(n, longestCall); l++ {
		if code[n-l] == 0xff && indirectCallLen(code[n-l+1:]) == l {
			return true
		}
	}
	return false
}

// indirectCallLen is the length of the instruction ff /2 whose ModRM byte
// and what follows it are rest, as its ModRM (and SIB) bytes say; 0 when it
// is not a call (the ModRM's reg field is not 2) or rest is too short to
// tell.
func indirectCallLen(rest []byte) int {
	if len(rest) == 0 || rest[0]>>3&7 != 2 {
		return 0
	}
	mod, rm := rest[0]>>6, rest[0]&7
	n := 2
	if mod != 3 && rm == 4 { // a SIB byte follows
		if len(rest) < 2 {
			return 0
		}
		n++
		if mod == 0 && rest[1]&7 == 5 { // no base: a 32-bit displacement
			n += 4
		}
	}
	switch {
	case mod == 0 && rm == 5: // RIP-relative
		n += 4
	case mod == 1:
		n++
	case mod == 2:
		n += 4
	}
	return n
}
