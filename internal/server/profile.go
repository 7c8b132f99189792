package server

import (
	"bytes"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/pprof"
)

// flameExport serves GET /api/flame: the flame graph's JSON, or with
// format=pprof its stacks as a gzip'd pprof profile, with format=folded as
// folded text. The profile's values are the stacks' weights in the
// vital's unit, rounded to integers.
func (a *api) flameExport(w http.ResponseWriter, r *http.Request) {
	format := r.URL.Query().Get("format")
	if format == "" || format == "json" {
		handle(a.flame)(w, r)
		return
	}
	if format != "pprof" && format != "folded" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("format: %q is not json, pprof or folded", format))
		return
	}
	if r.URL.Query().Has("base_from") || r.URL.Query().Has("base_to") {
		writeError(w, http.StatusBadRequest, "format: a differential flame graph (base_from, base_to) exports as json only")
		return
	}
	out, err := a.flame(r)
	if err != nil {
		writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
		return
	}
	ans := out.(*FlameAnswer)
	stacks := make([]pprof.Stack, 0, len(ans.Stacks))
	var modules []string
	seen := map[string]bool{}
	for _, s := range ans.Stacks {
		stacks = append(stacks, pprof.Stack{Frames: s.Frames, Modules: s.Modules, Weight: int64(math.Round(s.Weight))})
		for _, m := range s.Modules {
			if m != "" && !seen[m] {
				seen[m] = true
				modules = append(modules, m)
			}
		}
	}
	var buf bytes.Buffer
	if format == "folded" {
		err = pprof.WriteFolded(&buf, stacks)
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		var ids map[string]string
		if ids, err = a.buildIDs(r, modules); err == nil {
			q := r.URL.Query()
			from, to := parseInt64(q.Get("from")), parseInt64(q.Get("to"))
			err = pprof.Write(&buf, pprof.Profile{SampleType: ans.Vital, Unit: pprofUnit(ans.Unit), Stacks: stacks,
				BuildIDs: ids, TimeNanos: from, DurationNanos: to - from})
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Disposition", fmt.Sprintf(`attachment; filename="holter-%s.pb.gz"`, ans.Vital))
	}
	if err != nil {
		writeError(w, queryErrorCode(w, err, http.StatusInternalServerError), err.Error())
		return
	}
	w.Write(buf.Bytes())
}

// buildIDs are the build ids of the modules the executables table knows.
func (a *api) buildIDs(r *http.Request, modules []string) (map[string]string, error) {
	ids := map[string]string{}
	if len(modules) == 0 {
		return ids, nil
	}
	var marks []string
	var args []any
	for i, m := range modules {
		marks = append(marks, fmt.Sprintf("$%d", i+1))
		args = append(args, m)
	}
	res, err := a.query(r.Context(), `SELECT path, build_id FROM executables WHERE path IN (`+strings.Join(marks, ",")+`)`, args...)
	if err != nil {
		return nil, err
	}
	for _, row := range res.Rows {
		ids[asString(row[0])] = asString(row[1])
	}
	return ids, nil
}

// pprofUnit is a vital's unit as pprof names it: microseconds scale in
// its reports, bytes too.
func pprofUnit(unit string) string {
	switch {
	case strings.HasPrefix(unit, "µs"):
		return "microseconds"
	case strings.HasPrefix(unit, "bytes"):
		return "bytes"
	}
	return "count"
}

// parseInt64 reads a parameter flame has checked already.
func parseInt64(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}
