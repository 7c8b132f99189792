package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/holter-dev/holter/internal/store"
)

// maxRunBytes bounds a run's JSON.
const maxRunBytes = 1 << 20

// registerRuns adds POST /api/runs: `holter run` records a measured run in
// the catalog of the store the recorder holds; and PUT and DELETE
// /api/boost/{pid}, which start and end the exact sampling of the block
// requests of the process tree `holter run` records.
func registerRuns(mux *http.ServeMux, opts Options) {
	boost := func(on bool) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if opts.Boost == nil {
				writeError(w, http.StatusNotFound, "no recorder: this server shows a stored recording")
				return
			}
			pid, err := strconv.ParseUint(r.PathValue("pid"), 10, 32)
			if err != nil || pid == 0 {
				writeError(w, http.StatusBadRequest, fmt.Sprintf("pid %q is not a process id", r.PathValue("pid")))
				return
			}
			if err := opts.Boost(uint32(pid), on); err != nil {
				writeError(w, http.StatusBadRequest, err.Error())
				return
			}
			writeJSON(w, http.StatusOK, map[string]any{"pid": pid, "boosted": on})
		}
	}
	mux.HandleFunc("PUT /api/boost/{pid}", boost(true))
	mux.HandleFunc("DELETE /api/boost/{pid}", boost(false))
	mux.HandleFunc("POST /api/runs", func(w http.ResponseWriter, r *http.Request) {
		if opts.AddRun == nil {
			writeError(w, http.StatusNotFound, "no recorder: this server shows a stored recording")
			return
		}
		var run store.Run
		if err := json.NewDecoder(io.LimitReader(r.Body, maxRunBytes)).Decode(&run); err != nil {
			writeError(w, http.StatusBadRequest, "read run: "+err.Error())
			return
		}
		if err := opts.AddRun(r.Context(), run); err != nil {
			code := http.StatusBadRequest
			if errors.Is(err, store.ErrRunExists) {
				code = http.StatusConflict
			}
			writeError(w, code, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, run)
	})
}
