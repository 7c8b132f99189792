package export

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
)

// The spool is a directory of batch files, one per batch not yet
// acknowledged by ClickHouse, named by a sequence number so they ship in
// the order they were made. A file is written to a temporary name,
// synced and renamed, so after a crash a batch is wholly there or absent;
// it is removed when the server has it. spool.json keeps the last epoch
// spooled and what was dropped, so a restarted exporter spools the epochs
// committed while it was down and keeps counting.
type spool struct {
	dir   string
	limit int64

	mu    sync.Mutex
	files []*spoolFile
	// reopened: the spool was left by an earlier process, which may have
	// written (and shipped) the batches of its last add without saving
	// the state that says so; the first add after reopening marks its
	// batches as maybe shipped.
	reopened bool
	bytes    int64
	next     uint64
	state    spoolState
	changed  chan struct{}
}

type spoolFile struct {
	name  string
	size  int64
	rows  int
	group group
	maybe bool // may have reached the server already: check before sending
}

// group is what one add spooled: an epoch's batches, or a span commit
// range's (Spans, Epoch the range's last sequence number). A group's
// files are adjacent in the spool; it is shipped when its last file is,
// and dropped whole.
type group struct {
	epoch int64
	spans bool
}

// spansPending: a span commit range has batches in the spool.
func (s *spool) spansPending() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.files {
		if f.group.spans {
			return true
		}
	}
	return false
}

func (h batchHeader) group() group { return group{epoch: h.Epoch, spans: h.Spans} }

type spoolState struct {
	LastEpoch int64 `json:"last_epoch"`
	// LastSpanSeq is the last span commit sequence number spooled
	// (store.SpanCommitSeq).
	LastSpanSeq    int64  `json:"last_span_seq"`
	DroppedBatches uint64 `json:"dropped_batches"`
	DroppedRows    uint64 `json:"dropped_rows"`
}

// batchHeader is the first line of a batch file; the rows follow as
// JSONEachRow.
type batchHeader struct {
	ID    string `json:"id"`
	Table string `json:"table"`
	// Epoch is the epoch, or for span batches (Spans) the last span
	// commit sequence number, the batch is of.
	Epoch int64 `json:"epoch"`
	Spans bool  `json:"spans,omitempty"`
	Rows  int   `json:"rows"`
}

// batch is one INSERT: rows of one table from one epoch.
type batch struct {
	batchHeader
	data []byte
}

const stateFile = "spool.json"

func openSpool(dir string, limit int64) (*spool, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	s := &spool{dir: dir, limit: limit, next: 1, state: spoolState{LastEpoch: -1}, changed: make(chan struct{}, 1)}
	if b, err := os.ReadFile(filepath.Join(dir, stateFile)); err == nil {
		if err := json.Unmarshal(b, &s.state); err != nil {
			return nil, fmt.Errorf("spool: %s: %w", stateFile, err)
		}
		s.reopened = true
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("spool: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("spool: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if strings.HasSuffix(name, ".tmp") {
			os.Remove(filepath.Join(dir, name)) // a write the crash interrupted
			continue
		}
		seq, ok := seqOf(name)
		if !ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			return nil, fmt.Errorf("spool: %w", err)
		}
		h, err := readHeader(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		// Batches left by an earlier process may have been sent without
		// the acknowledgement reaching it.
		s.files = append(s.files, &spoolFile{name: name, size: info.Size(), rows: h.Rows, group: h.group(), maybe: true})
		s.bytes += info.Size()
		if seq >= s.next {
			s.next = seq + 1
		}
	}
	sort.Slice(s.files, func(i, j int) bool { return s.files[i].name < s.files[j].name })
	if len(s.files) > 0 {
		s.reopened = true
	}
	return s, nil
}

func seqOf(name string) (uint64, bool) {
	num, ok := strings.CutSuffix(name, ".batch")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseUint(num, 10, 64)
	return n, err == nil
}

func readHeader(path string) (batchHeader, error) {
	var h batchHeader
	f, err := os.Open(path)
	if err != nil {
		return h, fmt.Errorf("spool: %w", err)
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadBytes('\n')
	if err != nil {
		return h, fmt.Errorf("spool: %s: %w", path, err)
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("spool: %s: %w", path, err)
	}
	return h, nil
}

// add writes batches, one group, durably, then records in the state what
// they covered (done: the epoch or span sequence spooled); if a write
// fails, the group's files written so far are removed, so spooling it
// again duplicates nothing. Over the size limit, the oldest groups are
// dropped whole and counted — the newest data is what a diagnosis most
// likely needs, and an epoch is in ClickHouse wholly or not at all (no
// samples without their stacks); dropped says whether any batch was.
func (s *spool) add(batches []*batch, done func(*spoolState)) (dropped bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maybe := s.reopened
	s.reopened = false
	written := len(s.files)
	for _, b := range batches {
		name := fmt.Sprintf("%020d.batch", s.next)
		s.next++
		content := b.content(b.header())
		if err := writeDurably(filepath.Join(s.dir, name), content); err != nil {
			for _, f := range s.files[written:] {
				os.Remove(filepath.Join(s.dir, f.name))
				s.bytes -= f.size
			}
			s.files = s.files[:written]
			return false, fmt.Errorf("spool: %w", err)
		}
		s.files = append(s.files, &spoolFile{name: name, size: int64(len(content)), rows: b.Rows, group: b.group(), maybe: maybe})
		s.bytes += int64(len(content))
	}
	for s.limit > 0 && s.bytes > s.limit && len(s.files) > 0 {
		g := s.files[0].group
		for len(s.files) > 0 && s.files[0].group == g {
			f := s.files[0]
			if err := os.Remove(filepath.Join(s.dir, f.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return dropped, fmt.Errorf("spool: drop: %w", err)
			}
			s.files = s.files[1:]
			s.bytes -= f.size
			s.state.DroppedBatches++
			s.state.DroppedRows += uint64(f.rows)
			dropped = true
		}
	}
	done(&s.state)
	if err := s.saveState(); err != nil {
		return dropped, err
	}
	select {
	case s.changed <- struct{}{}:
	default:
	}
	return dropped, syncDir(s.dir)
}

// header is a batch's header line, without its newline.
func (b *batch) header() []byte {
	hdr, _ := json.Marshal(b.batchHeader)
	return hdr
}

// content is a batch's file: its header line, then its rows.
func (b *batch) content(hdr []byte) []byte {
	return append(append(hdr, '\n'), b.data...)
}

// wouldDrop says whether adding batches would drop any: only add makes
// the spool grow, so a no holds until the add.
func (s *spool) wouldDrop(batches []*batch) bool {
	n := int64(0)
	for _, b := range batches {
		n += int64(len(b.header()) + 1 + len(b.data))
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit > 0 && s.bytes+n > s.limit
}

func (s *spool) saveState() error {
	b, _ := json.Marshal(s.state)
	if err := writeDurably(filepath.Join(s.dir, stateFile), b); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}

// head is the oldest batch, read from its file.
func (s *spool) head() (*batch, *spoolFile, error) {
	s.mu.Lock()
	if len(s.files) == 0 {
		s.mu.Unlock()
		return nil, nil, nil
	}
	f := s.files[0]
	s.mu.Unlock()
	content, err := os.ReadFile(filepath.Join(s.dir, f.name))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil // dropped meanwhile
	}
	if err != nil {
		return nil, nil, fmt.Errorf("spool: %w", err)
	}
	line, rest, ok := bytes.Cut(content, []byte("\n"))
	b := &batch{data: rest}
	if !ok || json.Unmarshal(line, &b.batchHeader) != nil {
		return nil, f, fmt.Errorf("spool: %s is not a batch file", f.name)
	}
	return b, f, nil
}

// ack removes a batch the server has; whole says it was the last of its
// group left, so the group's every batch is shipped.
func (s *spool) ack(f *spoolFile) (whole bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.files) == 0 || s.files[0] != f {
		return false, nil // dropped meanwhile
	}
	s.files = s.files[1:]
	s.bytes -= f.size
	if err := os.Remove(filepath.Join(s.dir, f.name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fmt.Errorf("spool: %w", err)
	}
	return len(s.files) == 0 || s.files[0].group != f.group, nil
}

func (s *spool) markMaybe(f *spoolFile) {
	s.mu.Lock()
	f.maybe = true
	s.mu.Unlock()
}

func (s *spool) isMaybe(f *spoolFile) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return f.maybe
}

func (s *spool) lastEpoch() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.LastEpoch
}

func (s *spool) lastSpanSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.state.LastSpanSeq
}

func writeDurably(path string, content []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o640)
	if err != nil {
		return err
	}
	if _, err := f.Write(content); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("spool: %w", err)
	}
	return nil
}
