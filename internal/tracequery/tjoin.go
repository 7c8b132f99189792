package tracequery

import (
	"fmt"
	"sort"
	"strings"
)

// Temporal joins of two probe streams (Fay §3, §4.4: events of one stream
// matched to the latest, or the open, event of another by a key):
//
//	FROM syscall.openat AS o JOIN syscall.read AS r ON o.ret = r.fd AND o.pid = r.pid
//	FROM uprobe."/bin/x".f AS a FOLLOWED BY uretprobe."/bin/x".f AS b ON a.tid = b.tid
//
// Each side is one probe (a syscall's entry when the query reads its
// arguments, its exit when it reads ret). The equalities of ON between a
// field of each side are the key; the left probe keeps, per key, the left
// fields the query reads (and its time) in a bounded LRU hash; the right
// probe looks its key up and, found, runs the rest of the query with both
// sides' fields. JOIN keeps the left event for the right events after it
// (the latest left event per key meets each right one); FOLLOWED BY
// forgets it at its first match (each left event meets the next right
// one: @start[tid] pairing). The rest of ON, and WHERE, filter in the
// probe: conditions on the left side alone at the left probe, so that
// what they refuse takes no place in the map. Keys evicted from the full
// map are counted (evicted); right events with no left one are counted
// (unmatched) when the conditions are not all on the left side.

// JoinSpec is how a temporal join's two streams meet.
type JoinSpec struct {
	Kind        JoinKind
	Left, Right string // the aliases
	// LeftKey[i] = RightKey[i] are the key's parts.
	LeftKey, RightKey []Node
}

// querySource finds the query's source: its FROM, or the join of its two
// streams.
func (c *Catalog) querySource(q *Query) (*Source, error) {
	if q.Join == nil {
		return c.Lookup(q.From)
	}
	return c.joinSource(q)
}

// joinSide is one stream of a join: its probe and fields.
type joinSide struct {
	alias  string
	src    *Source
	probe  Probe
	fields []Field
}

func (c *Catalog) joinSource(q *Query) (*Source, error) {
	j := q.Join
	l, r := q.From, j.Right
	if l.Alias == "" || r.Alias == "" || strings.EqualFold(l.Alias, r.Alias) {
		ref := l
		if l.Alias != "" {
			ref = r
		}
		return nil, &Error{Pos: ref.pos, End: ref.end, Msg: "each stream of a join needs its own alias: FROM src AS a JOIN src AS b ON a.x = b.y"}
	}
	used := usedNames(q)
	var sides [2]*joinSide
	for i, ref := range []SourceRef{l, r} {
		s, err := c.Lookup(ref)
		if err != nil {
			return nil, err
		}
		side, err := pickSide(s, ref, used[ref.Alias])
		if err != nil {
			return nil, err
		}
		sides[i] = side
	}
	spec := &JoinSpec{Kind: j.Kind, Left: l.Alias, Right: r.Alias}
	src := &Source{
		Name: fmt.Sprintf("%s AS %s %s %s AS %s", l, l.Alias, j.Kind, r, r.Alias),
		Desc: fmt.Sprintf("%s meets %s by key", sides[1].src.Desc, sides[0].src.Desc),
		Join: spec,
	}
	if j.Kind == JoinFollowedBy {
		src.Desc = fmt.Sprintf("each %s with the next %s of its key", sides[0].src.Desc, sides[1].src.Desc)
	}
	for i, side := range sides {
		s := SideBegin
		if i == 1 {
			s = SideEnd
		}
		for _, f := range side.fields {
			f.Name = side.alias + "." + f.Name
			f.Side = s
			src.Fields = append(src.Fields, f)
		}
		// The left side's builtins are its task's at its event, kept with
		// it; the right side's are the current task's.
		for _, b := range Builtins {
			f := b
			f.Builtin, f.Name, f.Side = b.Name, side.alias+"."+b.Name, s
			src.Fields = append(src.Fields, f)
		}
	}
	begin, end := sides[0].probe, sides[1].probe
	// The key: ON's equalities between a left and a right field.
	for _, cond := range splitAnd(j.On) {
		b, ok := cond.(*Binary)
		if ok && b.Op == "=" {
			lside, lok := sideOf(b.L, spec)
			rside, rok := sideOf(b.R, spec)
			if lok && rok && lside != rside {
				lk, rk := b.L, b.R
				if lside == 1 {
					lk, rk = rk, lk
				}
				spec.LeftKey = append(spec.LeftKey, lk)
				spec.RightKey = append(spec.RightKey, rk)
				continue
			}
		}
		src.joinRest = append(src.joinRest, cond)
	}
	if len(spec.LeftKey) == 0 {
		return nil, errAt(j.On, "a join needs a key: an equality of a field of %s and one of %s in ON, e.g. %s.tid = %s.tid", l.Alias, r.Alias, l.Alias, r.Alias)
	}
	begin.PairByTid, end.PairByTid = false, false
	begin.PairKey, end.PairKey = nil, nil
	if len(spec.LeftKey) == 1 && isName(spec.LeftKey[0], l.Alias+".tid") && isName(spec.RightKey[0], r.Alias+".tid") {
		begin.PairByTid, end.PairByTid = true, true
	} else {
		begin.PairExprs, end.PairExprs = spec.LeftKey, spec.RightKey
	}
	src.Begin, src.End = &begin, end
	return src, nil
}

func isName(n Node, name string) bool {
	id, ok := n.(*Ident)
	return ok && id.Name == name
}

// sideOf says which stream an expression reads: 0 the left, 1 the right.
func sideOf(n Node, spec *JoinSpec) (int, bool) {
	side := -1
	ok := true
	walk(n, func(x Node) bool {
		id, isID := x.(*Ident)
		if !isID {
			return true
		}
		s := -1
		switch {
		case strings.HasPrefix(id.Name, spec.Left+"."):
			s = 0
		case strings.HasPrefix(id.Name, spec.Right+"."):
			s = 1
		}
		if s < 0 || side >= 0 && s != side {
			ok = false
		}
		side = s
		return ok
	})
	return side, ok && side >= 0
}

// usedNames are the field names the query reads of each alias.
func usedNames(q *Query) map[string][]string {
	out := map[string][]string{}
	seen := map[string]bool{}
	visit := func(n Node) {
		walk(n, func(x Node) bool {
			if id, ok := x.(*Ident); ok {
				if a, f, ok := strings.Cut(id.Name, "."); ok && !seen[id.Name] {
					seen[id.Name] = true
					out[a] = append(out[a], f)
				}
			}
			return true
		})
	}
	for _, n := range q.exprs() {
		visit(n)
	}
	return out
}

// pickSide makes a stream of a join from a source: a single probe, or the
// one probe of a paired source whose fields the query reads (a syscall's
// entry for its arguments, its exit for ret).
func pickSide(s *Source, ref SourceRef, used []string) (*joinSide, error) {
	side := &joinSide{alias: ref.Alias, src: s, probe: s.End}
	if s.Begin == nil {
		side.fields = append(side.fields, s.Fields...)
		return side, nil
	}
	var begin, end []string
	for _, name := range used {
		f, ok := ownField(s, name)
		switch {
		case !ok:
		case f.Loc == LocLatency:
			return nil, &Error{Pos: ref.pos, End: ref.end, Msg: fmt.Sprintf("%s.latency: a stream of a join is one probe; the latency of %s is a query of its own (FROM %s)", ref.Alias, s.Name, ref)}
		case f.Side == SideBegin:
			begin = append(begin, name)
		default:
			end = append(end, name)
		}
	}
	if len(begin) > 0 && len(end) > 0 {
		sort.Strings(begin)
		sort.Strings(end)
		return nil, &Error{Pos: ref.pos, End: ref.end, Msg: fmt.Sprintf("a stream of a join is one probe: %s reads %s at its entry and %s at its return; join them as two streams (FROM %s AS e FOLLOWED BY %s AS x ON e.tid = x.tid)",
			ref.Alias, strings.Join(begin, ", "), strings.Join(end, ", "), ref, ref)}
	}
	wantEnd := len(end) > 0 || strings.EqualFold(ref.Parts[0], "uretprobe")
	for _, f := range s.Fields {
		if f.Loc == LocLatency || (f.Side == SideEnd) != wantEnd {
			continue
		}
		f.Side = SideEnd
		side.fields = append(side.fields, f)
	}
	if !wantEnd {
		side.probe = *s.Begin
	}
	return side, nil
}

// qualify names a join's field with its side's alias when the query wrote
// it without: a field only one side has. Builtins without an alias are
// the right side's: the current task's at the event that completes the
// join.
func (s *Source) qualify(id *Ident) error {
	spec := s.Join
	if strings.HasPrefix(id.Name, spec.Left+".") || strings.HasPrefix(id.Name, spec.Right+".") || strings.HasPrefix(id.Name, "task.") {
		if _, ok := s.Field(id.Name); !ok {
			return errAt(id, "unknown field %s of the join (%s)", id.Name, s.Name)
		}
		return nil
	}
	var found []string
	for _, a := range []string{spec.Left, spec.Right} {
		if f, ok := ownField(s, a+"."+id.Name); ok && f.Builtin == "" {
			found = append(found, f.Name)
		}
	}
	switch len(found) {
	case 1:
		id.Name = found[0]
	case 2:
		return errAt(id, "%s is a field of both streams: write %s or %s", id.Name, found[0], found[1])
	default:
		if builtin(id.Name) != nil {
			id.Name = spec.Right + "." + id.Name
			return nil
		}
		return errAt(id, "unknown field %s of the join (%s): fields are written alias.name (%s.…, %s.…)", id.Name, s.Name, spec.Left, spec.Right)
	}
	return nil
}
