package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
	"github.com/holter-dev/holter/internal/symbol"
)

// agentFile in the data directory tells other holter commands that a
// recorder runs, and where its UI is; its sockets are beside it.
const agentFile = "agent.json"

type agentInfo struct {
	Pid int `json:"pid"`
	// Start is the process's start time (/proc/PID/stat field 22): a
	// later process given the same pid is not taken for the recorder.
	Start uint64 `json:"start"`
	API   string `json:"api,omitempty"`
	// OwnToken says the API takes a token given at its start, not the
	// data directory's.
	OwnToken bool `json:"own_token,omitempty"`
}

// processStart is the start time of process pid, in clock ticks since boot.
func processStart(pid int) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return symbol.StatField(b, 22)
}

// writeAgentInfo records this process as dir's recorder. The file is
// readable by all who may enter dir: it holds no secret, and tells
// readers where the UI is.
func writeAgentInfo(dir string, info agentInfo) error {
	var err error
	info.Pid = os.Getpid()
	if info.Start, err = processStart(info.Pid); err != nil {
		return fmt.Errorf("write %s: %w", agentFile, err)
	}
	b, _ := json.Marshal(info)
	tmp := filepath.Join(dir, agentFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", agentFile, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", agentFile, err)
	}
	return os.Rename(tmp, filepath.Join(dir, agentFile))
}

// readAgentInfo returns the recorder recorded in dir, if that process
// still runs: its pid names a process started when it was.
func readAgentInfo(dir string) (agentInfo, bool) {
	var info agentInfo
	b, err := os.ReadFile(filepath.Join(dir, agentFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Pid <= 0 {
		return info, false
	}
	start, err := processStart(info.Pid)
	return info, err == nil && start == info.Start
}

// apiToken is the API token a command was given: with --token (which
// other users see in ps), --token-file, or $HOLTER_TOKEN.
type apiToken struct {
	value, from string
}

func addTokenFlags(fs *flag.FlagSet) *apiToken {
	t := &apiToken{}
	fs.Func("token", "API token (other users see it in ps: prefer --token-file or $HOLTER_TOKEN)", func(v string) error {
		return t.set(v, "--token")
	})
	fs.Func("token-file", "file holding the API token (or give it in $HOLTER_TOKEN)", func(path string) error {
		v, err := access.ReadToken(path)
		if err != nil {
			return err
		}
		return t.set(v, "--token-file")
	})
	return t
}

func (t *apiToken) set(v, from string) error {
	switch {
	case t.from != "" && t.from != from:
		return errors.New("give --token or --token-file, not both")
	case strings.TrimSpace(v) == "":
		return errors.New("empty token")
	}
	t.value, t.from = strings.TrimSpace(v), from
	return nil
}

// get is the token given, "" when none was.
func (t *apiToken) get() string {
	if t.from != "" {
		return t.value
	}
	return strings.TrimSpace(os.Getenv("HOLTER_TOKEN"))
}

// agentFlags are the flags of the commands that reach a recorder: its data
// directory, whose socket they use, or its API address and token.
type agentFlags struct {
	data, api *string
	token     *apiToken
}

func addAgentFlags(fs *flag.FlagSet) agentFlags {
	return agentFlags{
		data:  valueFlag(fs, "data", defaultDataDir(), dataHelp+"; the running recorder's socket is there", nonEmpty),
		api:   valueFlag(fs, "api", "", "recorder API address, over HTTP with a token (default: the socket of the recorder recording into --data, if any)", apiAddress),
		token: addTokenFlags(fs),
	}
}

// agent returns a client for the recorder these flags name, if one answers.
func (f agentFlags) agent() (*client, bool) { return findAgent(*f.data, *f.api, f.token.get()) }

// client talks to a recorder's API, over HTTP or its socket.
type client struct {
	base  string
	token string
	http  *http.Client
	// stream has no time limit, for live traces.
	stream *http.Client
	// where names the recorder in messages.
	where string
}

func newClient(addr, token string) *client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	base := strings.TrimRight(addr, "/")
	return &client{base: base, token: token, http: &http.Client{Timeout: 5 * time.Minute}, stream: &http.Client{}, where: base}
}

// socketClient is a client of the recorder recording into dir, over its
// admin socket, or the readers' when the admin one refuses this user;
// false when no recorder listens there.
func socketClient(dir string) (*client, bool) {
	path := filepath.Join(dir, access.AdminSocketFile)
	c, err := net.Dial("unix", path)
	if errors.Is(err, fs.ErrPermission) {
		if rc, rerr := net.Dial("unix", filepath.Join(dir, access.ReaderSocketFile)); rerr == nil {
			path, c, err = filepath.Join(dir, access.ReaderSocketFile), rc, nil
		}
	}
	switch {
	case err == nil:
		c.Close()
	case errors.Is(err, fs.ErrPermission):
		// The recorder runs, and refuses this user: say so rather than
		// look for the store it holds.
	default:
		return nil, false
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
		if errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: the recorder's socket admits root, the members of group holter and, to read, of group holter-readers", err)
		}
		return c, err
	}}
	return &client{base: "http://holter", http: &http.Client{Transport: tr, Timeout: 5 * time.Minute}, stream: &http.Client{Transport: tr}, where: path}, true
}

func (c *client) do(ctx context.Context, method, path string, body io.Reader, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return err
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var e server.Error
		if json.NewDecoder(resp.Body).Decode(&e) == nil && e.Error != "" {
			return apiError{e.Error}
		}
		return apiError{resp.Status}
	}
	if w, ok := out.(io.Writer); ok {
		_, err := io.Copy(w, resp.Body)
		return err
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// apiError is an answer from the recorder, as opposed to a failure to reach it.
type apiError struct{ msg string }

func (e apiError) Error() string { return e.msg }

func (c *client) query(ctx context.Context, q string) (*store.Result, error) {
	var res store.Result
	err := c.do(ctx, http.MethodPost, "/api/query", strings.NewReader(q), &res)
	return &res, err
}

func (c *client) setVital(ctx context.Context, name string, on bool) (*agentStatus, error) {
	var st agentStatus
	err := c.do(ctx, http.MethodPost, fmt.Sprintf("/api/vitals/%s?enabled=%t", url.PathEscape(name), on), nil, &st)
	return &st, err
}

func (c *client) status(ctx context.Context) (*agentStatus, error) {
	var st agentStatus
	err := c.do(ctx, http.MethodGet, "/api/status", nil, &st)
	return &st, err
}

// findAgent returns a client for the recorder of dir (over its socket),
// or of the address given explicitly, if one answers.
func findAgent(dir, addr, token string) (*client, bool) {
	if addr == "" {
		// A socket that accepts, or refuses this user, is a recorder's.
		return socketClient(dir)
	}
	if token == "" {
		// Root, or a reader, asking for the recorder of dir by its
		// address has its token in dir.
		token = dirToken(dir)
	}
	c := newClient(addr, token)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := c.status(ctx); err != nil {
		var ae apiError
		if !errors.As(err, &ae) {
			return nil, false
		}
	}
	return c, true
}

// dirToken is the token kept in dir that this user may read: the admin's,
// else the readers'; "" if neither.
func dirToken(dir string) string {
	for _, name := range []string{access.AdminTokenFile, access.ReaderTokenFile} {
		if t, err := access.ReadToken(filepath.Join(dir, name)); err == nil {
			return t
		}
	}
	return ""
}
