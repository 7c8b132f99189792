package pprof

import (
	"compress/gzip"
	"fmt"
	"io"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Stack is one folded stack, root first, and its weight. Modules, when
// given, parallels Frames ("" for a frame of no module, such as the
// process name a flame graph starts with).
type Stack struct {
	Frames  []string
	Modules []string
	Weight  int64
}

// Profile is what Write encodes.
type Profile struct {
	// SampleType and Unit name the value: e.g. "cpu", "microseconds".
	SampleType, Unit string
	Stacks           []Stack
	// BuildIDs are the modules' GNU build ids (hex), where known.
	BuildIDs      map[string]string
	TimeNanos     int64
	DurationNanos int64
}

// protobuf field numbers of profile.proto.
const (
	profSampleType    = 1
	profSample        = 2
	profMapping       = 3
	profLocation      = 4
	profFunction      = 5
	profStringTable   = 6
	profTimeNanos     = 9
	profDurationNanos = 10
	profPeriodType    = 11
	profPeriod        = 12
	profDefaultType   = 14

	valueTypeType = 1
	valueTypeUnit = 2

	sampleLocation = 1
	sampleValue    = 2

	mappingID           = 1
	mappingFilename     = 5
	mappingBuildID      = 6
	mappingHasFunctions = 7

	locationID      = 1
	locationMapping = 2
	locationLine    = 4

	lineFunction = 1

	functionID         = 1
	functionName       = 2
	functionSystemName = 3
)

type encoder struct {
	strings map[string]int64
	table   []string
}

func (e *encoder) str(s string) int64 {
	if i, ok := e.strings[s]; ok {
		return i
	}
	i := int64(len(e.table))
	e.strings[s] = i
	e.table = append(e.table, s)
	return i
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendMessage(b []byte, num protowire.Number, msg []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, msg)
}

func appendPacked(b []byte, num protowire.Number, vs []uint64) []byte {
	var p []byte
	for _, v := range vs {
		p = protowire.AppendVarint(p, v)
	}
	return appendMessage(b, num, p)
}

// Write encodes p as a gzip'd pprof profile. Frames are the stacks' own:
// the leaf is the last frame.
func Write(w io.Writer, p Profile) error {
	e := &encoder{strings: map[string]int64{"": 0}, table: []string{""}}
	type key struct{ module, frame string }
	locs := map[key]uint64{}
	mappings := map[string]uint64{}
	var mappingOrder []string
	var locBytes, funcBytes, sampleBytes []byte
	for _, s := range p.Stacks {
		if s.Weight <= 0 {
			continue
		}
		ids := make([]uint64, 0, len(s.Frames))
		for i := len(s.Frames) - 1; i >= 0; i-- {
			module := ""
			if i < len(s.Modules) {
				module = s.Modules[i]
			}
			k := key{module, s.Frames[i]}
			id, ok := locs[k]
			if !ok {
				id = uint64(len(locs) + 1)
				locs[k] = id
				var mid uint64
				if module != "" {
					if mid, ok = mappings[module]; !ok {
						mid = uint64(len(mappings) + 1)
						mappings[module] = mid
						mappingOrder = append(mappingOrder, module)
					}
				}
				// One function per location, with the same id.
				var fn []byte
				fn = appendVarintField(fn, functionID, id)
				fn = appendVarintField(fn, functionName, uint64(e.str(k.frame)))
				fn = appendVarintField(fn, functionSystemName, uint64(e.str(k.frame)))
				funcBytes = appendMessage(funcBytes, profFunction, fn)
				var line []byte
				line = appendVarintField(line, lineFunction, id)
				var loc []byte
				loc = appendVarintField(loc, locationID, id)
				loc = appendVarintField(loc, locationMapping, mid)
				loc = appendMessage(loc, locationLine, line)
				locBytes = appendMessage(locBytes, profLocation, loc)
			}
			ids = append(ids, id)
		}
		var sm []byte
		sm = appendPacked(sm, sampleLocation, ids)
		sm = appendPacked(sm, sampleValue, []uint64{uint64(s.Weight)})
		sampleBytes = appendMessage(sampleBytes, profSample, sm)
	}
	valueType := func(typ, unit string) []byte {
		var vt []byte
		vt = appendVarintField(vt, valueTypeType, uint64(e.str(typ)))
		return appendVarintField(vt, valueTypeUnit, uint64(e.str(unit)))
	}
	var out []byte
	out = appendMessage(out, profSampleType, valueType(p.SampleType, p.Unit))
	out = append(out, sampleBytes...)
	for _, m := range mappingOrder {
		var mb []byte
		mb = appendVarintField(mb, mappingID, mappings[m])
		mb = appendVarintField(mb, mappingFilename, uint64(e.str(m)))
		mb = appendVarintField(mb, mappingBuildID, uint64(e.str(p.BuildIDs[m])))
		mb = appendVarintField(mb, mappingHasFunctions, 1)
		out = appendMessage(out, profMapping, mb)
	}
	out = append(out, locBytes...)
	out = append(out, funcBytes...)
	out = appendVarintField(out, profTimeNanos, uint64(p.TimeNanos))
	out = appendVarintField(out, profDurationNanos, uint64(p.DurationNanos))
	out = appendMessage(out, profPeriodType, valueType(p.SampleType, p.Unit))
	out = appendVarintField(out, profPeriod, 1)
	out = appendVarintField(out, profDefaultType, uint64(e.str(p.SampleType)))
	// The string table last: every index above is in it by now.
	for _, s := range e.table {
		out = protowire.AppendTag(out, profStringTable, protowire.BytesType)
		out = protowire.AppendString(out, s)
	}
	zw := gzip.NewWriter(w)
	if _, err := zw.Write(out); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("write pprof: %w", err)
	}
	return nil
}

// WriteFolded writes one line a stack, "root;…;leaf weight", as
// flamegraph.pl and speedscope read; a ';' within a frame becomes ':'.
func WriteFolded(w io.Writer, stacks []Stack) error {
	for _, s := range stacks {
		if s.Weight <= 0 {
			continue
		}
		frames := make([]string, len(s.Frames))
		for i, f := range s.Frames {
			frames[i] = strings.NewReplacer(";", ":", "\n", " ").Replace(f)
		}
		if _, err := fmt.Fprintf(w, "%s %d\n", strings.Join(frames, ";"), s.Weight); err != nil {
			return fmt.Errorf("write folded stacks: %w", err)
		}
	}
	return nil
}
