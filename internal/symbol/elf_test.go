package symbol

import (
	"fmt"
	"testing"
)

// TestSymTableFrontCoding: names that share prefixes with the one before,
// none, all of it, or are a prefix of it, across restart points, come
// back as they went in, with their ends.
func TestSymTableFrontCoding(t *testing.T) {
	var tab symTable
	var names []string
	prev := ""
	for i := range 3*symRestart + 5 {
		var name string
		switch i % 5 {
		case 0:
			name = fmt.Sprintf("github.com/x/y/pkg%d.(*T).Method%d", i/10, i)
		case 1:
			name = prev // an alias at another address
		case 2:
			name = prev[:len(prev)/2] // a prefix of the one before
		case 3:
			name = fmt.Sprintf("duckdb::Class%d::~Class%d", i, i)
		case 4:
			name = "" // unnamed
		}
		size := uint64(0)
		if i%3 == 0 {
			size = 8
		}
		tab.add(uint64(0x1000+16*i), size, name, prev)
		names, prev = append(names, name), name
	}
	tab.segEnd = []uint64{0x9000}
	tab.trim()
	for i, want := range names {
		s := tab.sym(i)
		wantEnd := uint64(0x1000 + 16*(i+1))
		switch {
		case i%3 == 0:
			wantEnd = s.start + 8
		case i == len(names)-1:
			wantEnd = 0x9000
		}
		if s.name != want || s.start != uint64(0x1000+16*i) || s.end != wantEnd {
			t.Errorf("symbol %d: %q [%#x, %#x), want %q [%#x, %#x)", i, s.name, s.start, s.end, want, 0x1000+16*i, wantEnd)
		}
	}
}
