package symbol

import (
	"strconv"
	"strings"
)

// demangle reads the common shapes of Itanium C++ ABI names (what g++ and
// clang emit) and Rust's legacy scheme, which uses the same shape with a
// hash as its last component:
//
//	_Z [N [r|V|K|R|O]*] (<length><identifier> | C1-3 | D0-2)+ [E] <parameters>
//
// where the parameters are builtin types, named classes and pointers,
// references and const of them; GCC's clone suffixes (.cold, .isra.0)
// read as c++filt prints them. A name it cannot read whole (templates,
// substitutions, operators, Rust v0 _R names) keeps its qualified name
// with its parameters as "(…)" (a function template's arguments as "<…>")
// when the name part was read, and is left mangled otherwise: a wrong name
// is worse than a mangled one.
func demangle(name string) string {
	rest, ok := strings.CutPrefix(name, "_Z")
	if !ok || rest == "" {
		return name
	}
	clone := ""
	if i := strings.IndexByte(rest, '.'); i > 0 {
		rest, clone = rest[:i], " [clone "+rest[i:]+"]"
	}
	var parts []string
	nested := rest[0] == 'N'
	if nested {
		rest = strings.TrimLeft(rest[1:], "rVKRO")
	}
	for rest != "" {
		switch {
		case rest[0] >= '0' && rest[0] <= '9':
			id, after, ok := sourceName(rest)
			if !ok {
				return name
			}
			parts, rest = append(parts, id), after
		case nested && len(parts) > 0 && len(rest) >= 2 && rest[0] == 'C' && rest[1] >= '1' && rest[1] <= '3':
			parts, rest = append(parts, parts[len(parts)-1]), rest[2:]
		case nested && len(parts) > 0 && len(rest) >= 2 && rest[0] == 'D' && rest[1] >= '0' && rest[1] <= '2':
			parts, rest = append(parts, "~"+parts[len(parts)-1]), rest[2:]
		default:
			return name
		}
		if !nested {
			break
		}
		if rest != "" && rest[0] == 'E' {
			rest = rest[1:]
			break
		}
	}
	if len(parts) == 0 {
		return name
	}
	// Rust legacy: the last component is the crate hash, and there are no
	// parameters.
	if last := parts[len(parts)-1]; nested && rest == "" && len(parts) > 1 && len(last) == 17 && last[0] == 'h' && isHex(last[1:]) {
		parts = parts[:len(parts)-1]
		for i, p := range parts {
			parts[i] = rustUnescape(p)
		}
		return strings.Join(parts, "::") + clone
	}
	qualified := strings.Join(parts, "::")
	if rest == "" {
		return qualified + clone
	}
	if rest[0] == 'I' { // a function template's arguments, then its type
		return qualified + "<…>(…)" + clone
	}
	params, ok := parameters(rest)
	if !ok {
		return qualified + "(…)" + clone
	}
	return qualified + "(" + params + ")" + clone
}

// sourceName reads <length><identifier>.
func sourceName(s string) (id, rest string, ok bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.Atoi(s[:i])
	if err != nil || n <= 0 || i+n > len(s) {
		return "", s, false
	}
	return s[i : i+n], s[i+n:], true
}

var builtins = map[byte]string{
	'v': "void", 'b': "bool", 'c': "char", 'a': "signed char", 'h': "unsigned char", 's': "short", 't': "unsigned short",
	'i': "int", 'j': "unsigned int", 'l': "long", 'm': "unsigned long", 'x': "long long", 'y': "unsigned long long",
	'f': "float", 'd': "double", 'e': "long double", 'w': "wchar_t",
}

// parameters reads a parameter list of builtin types and named classes,
// each under pointers, references and const; "v" alone is no parameters.
func parameters(s string) (string, bool) {
	if s == "v" {
		return "", true
	}
	var out []string
	for s != "" {
		t, rest, ok := paramType(s)
		if !ok {
			return "", false
		}
		out, s = append(out, t), rest
	}
	return strings.Join(out, ", "), true
}

func paramType(s string) (string, string, bool) {
	if s == "" {
		return "", s, false
	}
	switch c := s[0]; {
	case c == 'P' || c == 'R' || c == 'O' || c == 'K':
		t, rest, ok := paramType(s[1:])
		suffix := map[byte]string{'P': "*", 'R': "&", 'O': "&&", 'K': " const"}[c]
		return t + suffix, rest, ok
	case c >= '0' && c <= '9':
		return sourceName(s)
	default:
		t, ok := builtins[c]
		return t, s[1:], ok
	}
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// rustUnescape decodes the $..$ escapes and ".." of a Rust legacy name's
// component.
var rustEscapes = strings.NewReplacer("$LT$", "<", "$GT$", ">", "$u20$", " ", "$C$", ",", "$RF$", "&", "$BP$", "*", "$SP$", "@",
	"$u7b$", "{", "$u7d$", "}", "$u27$", "'", "$u5b$", "[", "$u5d$", "]", "$u7e$", "~", "$u3b$", ";", "$u2b$", "+", "$u22$", "\"", "..", "::")

func rustUnescape(s string) string {
	if strings.HasPrefix(s, "_$") {
		s = s[1:]
	}
	return rustEscapes.Replace(s)
}
