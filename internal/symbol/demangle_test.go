package symbol

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/holter-dev/holter/internal/testutil"
)

// TestDemangleAgreesWithCxxfilt compiles C++ with g++ and checks every
// function symbol demangle reads whole against c++filt; the shapes holter
// claims to read must be read, and what it cannot read whole keeps its
// qualified name (with "(…)") or stays mangled, never a wrong name.
func TestDemangleAgreesWithCxxfilt(t *testing.T) {
	testutil.RequireTool(t, "g++")
	testutil.RequireTool(t, "c++filt")
	dir := t.TempDir()
	src := filepath.Join(dir, "m.cc")
	if err := os.WriteFile(src, []byte(`
#include <string>
#include <vector>
namespace shop { namespace cart {
struct Basket {
	Basket() : n(0) {}
	~Basket() {}
	int add(const char *item, unsigned long qty, double price) { n += qty; return n + item[0] + (int)price; }
	long total(const std::string &s, int *p) const { return s.size() + *p; }
	void clear() { n = 0; }
	long n;
};
} }
int plain(int a, char b) { return a + b; }
template <typename T> T twice(T x) { return 2 * x; }
int main(int argc, char **argv) {
	shop::cart::Basket b;
	b.add(argv[0], 2, 1.5);
	std::string s = "x";
	int k = argc;
	b.clear();
	std::vector<int> v{1, 2};
	return plain(argc, 'a') + b.total(s, &k) + twice(argc) + twice(1.5) + v.size();
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "m")
	if out, err := exec.Command("g++", "-O0", "-o", bin, src).CombinedOutput(); err != nil {
		t.Fatalf("g++: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range syms {
		if isFunc(s.Info, s.Section, s.Value) && strings.HasPrefix(s.Name, "_Z") {
			names = append(names, s.Name)
		}
	}
	cmd := exec.Command("c++filt")
	cmd.Stdin = strings.NewReader(strings.Join(names, "\n") + "\n")
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
	read := map[string]bool{}
	for i, name := range names {
		got := demangle(name)
		switch {
		case got == name:
			t.Logf("left mangled: %s (%s)", name, want[i])
		case strings.Contains(got, "(…)"):
			// The qualified name must be c++filt's, whatever the parameters.
			if q := strings.TrimSuffix(got[:strings.Index(got, "(…)")], "<…>"); !strings.HasPrefix(want[i], q+"(") && !strings.Contains(want[i], " "+q+"<") {
				t.Errorf("%s: %q, c++filt %q", name, got, want[i])
			}
		case got != want[i]:
			t.Errorf("%s: %q, c++filt %q", name, got, want[i])
		default:
			read[got] = true
		}
	}
	for _, w := range []string{"plain(int, char)", "shop::cart::Basket::Basket()", "shop::cart::Basket::~Basket()",
		"shop::cart::Basket::add(char const*, unsigned long, double)", "shop::cart::Basket::clear()"} {
		if !read[w] {
			t.Errorf("%s not read: read %v", w, read)
		}
	}
}

// TestDemangleRustLegacy checks Rust's legacy names, whose last component
// is a hash c++filt keeps and holter drops.
func TestDemangleRustLegacy(t *testing.T) {
	for in, want := range map[string]string{
		"_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE": "std::rt::lang_start::{{closure}}",
		"_ZN5alloc3vec16Vec$LT$T$C$A$GT$4push17hfedcba9876543210E":                 "alloc::vec::Vec<T,A>::push",
		"_RNvCs1234_7mycrate4main": "_RNvCs1234_7mycrate4main", // v0: left mangled
		"main":                     "main",
		"_Z":                       "_Z",
		"_Z999x":                   "_Z999x",
	} {
		if got := demangle(in); got != want {
			t.Errorf("%s: %q, want %q", in, got, want)
		}
	}
}
