package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/holter-dev/holter/internal/server"
	"github.com/holter-dev/holter/internal/store"
)

// agentFile in the data directory tells other holter commands where the
// running recorder's API is.
const agentFile = "agent.json"

type agentInfo struct {
	Pid   int    `json:"pid"`
	API   string `json:"api"`
	Token string `json:"token,omitempty"`
}

func writeAgentInfo(dir string, info agentInfo) error {
	b, _ := json.Marshal(info)
	tmp := filepath.Join(dir, agentFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", agentFile, err)
	}
	return os.Rename(tmp, filepath.Join(dir, agentFile))
}

// readAgentInfo returns the recorder recorded in dir, if its process lives.
func readAgentInfo(dir string) (agentInfo, bool) {
	var info agentInfo
	b, err := os.ReadFile(filepath.Join(dir, agentFile))
	if err != nil || json.Unmarshal(b, &info) != nil || info.Pid <= 0 {
		return info, false
	}
	if err := syscall.Kill(info.Pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return info, false
	}
	return info, true
}

// agentFlags are the flags of the commands that reach a recorder: its data
// directory, or its API address and token.
type agentFlags struct {
	data, api, token *string
}

func addAgentFlags(fs *flag.FlagSet) agentFlags {
	return agentFlags{
		data:  valueFlag(fs, "data", defaultDataDir, "data directory holding the store", nonEmpty),
		api:   valueFlag(fs, "api", "", "recorder API address (default: the one recording into --data, if any)", apiAddress),
		token: fs.String("token", "", "API token"),
	}
}

// agent returns a client for the recorder these flags name, if one answers.
func (f agentFlags) agent() (*client, bool) { return findAgent(*f.data, *f.api, *f.token) }

// client talks to a recorder's API.
type client struct {
	base  string
	token string
	http  *http.Client
}

func newClient(addr, token string) *client {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	return &client{base: strings.TrimRight(addr, "/"), token: token, http: &http.Client{Timeout: 5 * time.Minute}}
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

// findAgent returns a client for the recorder of dir, or of the address
// given explicitly, if one answers.
func findAgent(dir, addr, token string) (*client, bool) {
	if addr == "" {
		info, ok := readAgentInfo(dir)
		if !ok {
			return nil, false
		}
		addr, token = info.API, info.Token
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
