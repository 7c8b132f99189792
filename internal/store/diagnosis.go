package store

import (
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"fmt"
)

// The findings table holds what the filters and rules (internal/findings)
// and the online reference comparison concluded, one row per finding over
// a time range, and the analysed table the ranges of each host's recording
// the recorder's online analysis has judged (its findings of them are all
// in the findings table); the runs table is the catalog of measured executions for
// reference-driven anomaly identification (internal/diagnose). Detail and
// params are JSON text so the same rows travel to ClickHouse unchanged.
const (
	findingsDDL = `CREATE TABLE IF NOT EXISTS findings (
		host VARCHAR NOT NULL,
		rule VARCHAR NOT NULL,
		timescale VARCHAR NOT NULL,
		subject VARCHAR NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		score DOUBLE NOT NULL,
		summary VARCHAR NOT NULL,
		pids UINTEGER[] NOT NULL,
		comms VARCHAR[] NOT NULL,
		detail VARCHAR NOT NULL)`
	analysedDDL = `CREATE TABLE IF NOT EXISTS analysed (
		host VARCHAR NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL)`
	runsDDL = `CREATE TABLE IF NOT EXISTS runs (
		id VARCHAR PRIMARY KEY,
		host VARCHAR NOT NULL,
		params VARCHAR NOT NULL,
		start_ns BIGINT NOT NULL,
		end_ns BIGINT NOT NULL,
		perf DOUBLE,
		perf_source VARCHAR NOT NULL,
		command VARCHAR NOT NULL,
		exit_code INTEGER NOT NULL)`
)

// Finding is one row of the findings table.
type Finding struct {
	Host      string   `json:"host"`
	Rule      string   `json:"rule"`
	Timescale string   `json:"timescale"`
	Subject   string   `json:"subject"`
	StartNs   int64    `json:"start_ns"`
	EndNs     int64    `json:"end_ns"`
	Score     float64  `json:"score"`
	Summary   string   `json:"summary"`
	Pids      []uint32 `json:"pids"`
	Comms     []string `json:"comms"`
	// Detail is JSON: the processes, sites and evidence of the finding.
	Detail string `json:"detail"`
}

// AddFindings stores findings in one transaction. A finding that continues
// a stored one — same host, rule, timescale and subject, starting no later
// than mergeGapNs after the stored one ends — extends it instead of adding
// a row, so a condition that lasts many epochs is one finding whose range
// grows (its score becomes the larger of the two, its detail the newer).
func (s *Store) AddFindings(ctx context.Context, fs []Finding, mergeGapNs int64) error {
	if len(fs) == 0 {
		return nil
	}
	return s.addFindings(ctx, fs, mergeGapNs, "", 0, 0)
}

// AddAnalysis stores the findings of an analysis of host's recording from
// fromNs to toNs (as AddFindings) and notes that range as analysed, in one
// transaction: a reader that finds a range analysed finds its findings. A
// range that continues an analysed one, no later than mergeGapNs after it,
// extends it.
func (s *Store) AddAnalysis(ctx context.Context, host string, fs []Finding, mergeGapNs, fromNs, toNs int64) error {
	if toNs < fromNs {
		return fmt.Errorf("add analysis: the range ends before it starts")
	}
	return s.addFindings(ctx, fs, mergeGapNs, host, fromNs, toNs)
}

func (s *Store) addFindings(ctx context.Context, fs []Finding, mergeGapNs int64, host string, fromNs, toNs int64) (err error) {
	if s.readOnly {
		return errors.New("add findings: store is open read-only")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("add findings: %w", err)
	}
	defer func() { err = s.wrote(err) }()
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("add findings: %w", err)
	}
	defer tx.Rollback()
	if host != "" {
		res, err := tx.ExecContext(ctx, `UPDATE analysed SET end_ns = greatest(end_ns, $1)
			WHERE host = $2 AND end_ns + $3 >= $4 AND start_ns <= $1`, toNs, host, mergeGapNs, fromNs)
		if err != nil {
			return fmt.Errorf("add analysis: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			if _, err := tx.ExecContext(ctx, `INSERT INTO analysed VALUES ($1, $2, $3)`, host, fromNs, toNs); err != nil {
				return fmt.Errorf("add analysis: %w", err)
			}
		}
	}
	for _, f := range fs {
		if f.EndNs < f.StartNs {
			return fmt.Errorf("add findings: %s ends before it starts", f.Rule)
		}
		res, err := tx.ExecContext(ctx, `UPDATE findings SET end_ns = greatest(end_ns, $1), score = greatest(score, $2), detail = $3
			WHERE host = $4 AND rule = $5 AND timescale = $6 AND subject = $7 AND end_ns + $8 >= $9 AND start_ns <= $1`,
			f.EndNs, f.Score, f.Detail, f.Host, f.Rule, f.Timescale, f.Subject, mergeGapNs, f.StartNs)
		if err != nil {
			return fmt.Errorf("add findings: %w", err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			continue
		}
		if f.Pids == nil {
			f.Pids = []uint32{}
		}
		if f.Comms == nil {
			f.Comms = []string{}
		}
		pids, _ := json.Marshal(f.Pids)
		comms, _ := json.Marshal(f.Comms)
		if _, err := tx.ExecContext(ctx, `INSERT INTO findings VALUES ($1, $2, $3, $4, $5, $6, $7, $8,
			CAST($9 AS UINTEGER[]), CAST($10 AS VARCHAR[]), $11)`,
			f.Host, f.Rule, f.Timescale, f.Subject, f.StartNs, f.EndNs, f.Score, f.Summary,
			string(pids), string(comms), f.Detail); err != nil {
			return fmt.Errorf("add findings: %w", err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("add findings: %w", err)
	}
	return nil
}

// Run is one row of the runs table: an execution measured while the
// recorder recorded, its condition (parameter names and values) and its
// performance figure, higher is better (nil if none was measured).
type Run struct {
	ID         string            `json:"id"`
	Host       string            `json:"host"`
	Params     map[string]string `json:"params"`
	StartNs    int64             `json:"start_ns"`
	EndNs      int64             `json:"end_ns"`
	Perf       *float64          `json:"perf,omitempty"`
	PerfSource string            `json:"perf_source"`
	Command    string            `json:"command"`
	ExitCode   int               `json:"exit_code"`
	// Pids are the processes of the run: the command's and those it
	// started that holter run saw while it ran (none for a run added
	// without them). A run's metrics are derived from their samples.
	Pids []uint32 `json:"pids,omitempty"`
}

// ErrRunExists is returned by AddRun for an id the catalog already has.
var ErrRunExists = errors.New("a run with this id exists")

// AddRun adds a run to the catalog.
func (s *Store) AddRun(ctx context.Context, r Run) (err error) {
	if s.readOnly {
		return errors.New("add run: store is open read-only")
	}
	if r.ID == "" || r.EndNs < r.StartNs {
		return fmt.Errorf("add run %q: needs an id and a time range that does not end before it starts", r.ID)
	}
	params, err := json.Marshal(r.Params)
	if err != nil {
		return fmt.Errorf("add run %q: %w", r.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writable(); err != nil {
		return fmt.Errorf("add run %q: %w", r.ID, err)
	}
	defer func() { err = s.wrote(err) }()
	var exists bool
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) > 0 FROM runs WHERE id = ?`, r.ID).Scan(&exists); err != nil {
		return fmt.Errorf("add run %q: %w", r.ID, err)
	}
	if exists {
		return fmt.Errorf("add run %q: %w", r.ID, ErrRunExists)
	}
	var perf driver.Value
	if r.Perf != nil {
		perf = *r.Perf
	}
	pids := "[]"
	if len(r.Pids) > 0 {
		b, _ := json.Marshal(r.Pids)
		pids = string(b)
	}
	if _, err := s.db.ExecContext(ctx, `INSERT INTO runs (id, host, params, start_ns, end_ns, perf, perf_source, command, exit_code, pids)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, CAST(? AS UINTEGER[]))`,
		r.ID, r.Host, string(params), r.StartNs, r.EndNs, perf, r.PerfSource, r.Command, r.ExitCode, pids); err != nil {
		return fmt.Errorf("add run %q: %w", r.ID, err)
	}
	return nil
}
