package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/holter-dev/holter/internal/store"
)

// maxRunBytes bounds a run's JSON.
const maxRunBytes = 1 << 20

// registerRuns adds POST /api/runs: `holter run` records a measured run in
// the catalog of the store the recorder holds.
func registerRuns(mux *http.ServeMux, opts Options) {
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
