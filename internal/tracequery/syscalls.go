package tracequery

import "strconv"

//go:generate go run ./internal/gensyscalls

// syscallNumbers are the system calls by name.
var syscallNumbers = func() map[string]int {
	m := make(map[string]int, len(syscallNames))
	for nr, name := range syscallNames {
		m[name] = nr
	}
	return m
}()

// syscallName names system call nr.
func syscallName(nr int64) string {
	if n, ok := syscallNames[int(nr)]; ok {
		return n
	}
	return "syscall_" + strconv.FormatInt(nr, 10)
}
