package main

import (
	"crypto/rand"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"github.com/holter-dev/holter/internal/access"
	"github.com/holter-dev/holter/internal/server"
)

// serveFlags are the flags of the commands that serve the API and the UI
// (record, ui): where, to whom, and how many live traces.
type serveFlags struct {
	api         *string
	token       *apiToken
	hosts       []string
	maxTraces   *int
	traceMemory *int64
	adminGroup  *[]uint32
	readerGroup *[]uint32

	// Set by check.
	traceBytes uint64
	groups     access.Groups
}

func addServeFlags(fs *flag.FlagSet, apiHelp string) *serveFlags {
	f := &serveFlags{
		api:   valueFlag(fs, "api", "127.0.0.1:7070", apiHelp, addressOr("")),
		token: addTokenFlags(fs),
	}
	fs.Func("api-host", "a name the UI is reached by, beside localhost and IP addresses (the Host header is checked); comma-separated or repeated", func(v string) error {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); !hostName.MatchString(h) {
				return fmt.Errorf("%q is not a host name (no port, no scheme)", h)
			}
			f.hosts = append(f.hosts, h)
		}
		return nil
	})
	f.maxTraces = valueFlag(fs, "max-traces", strconv.Itoa(server.DefaultMaxTraces), "live traces (holter trace, the UI's live queries) the API runs at once", countIn(1, 1024))
	f.traceMemory = valueFlag(fs, "trace-memory", "256MiB", "kernel memory the maps of the live traces the API runs may hold together", sizeIn(1<<20, 1<<40, ""))
	f.adminGroup = valueFlag(fs, "admin-group", "holter", `group (name or gid) whose members may do all but unsafe reads through the recorder's socket ("": root alone)`, group("holter"))
	f.readerGroup = valueFlag(fs, "reader-group", "holter-readers", `group (name or gid) whose members may read through the recorder's socket, and read the reader token ("": none)`, group("holter-readers"))
	return f
}

var hostName = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*$`)

// check checks the flags before anything is loaded or created.
func (f *serveFlags) check() error {
	if *f.api != "" {
		if err := server.CheckAddr(*f.api, f.token.get() != ""); err != nil {
			return err
		}
	}
	f.traceBytes = uint64(*f.traceMemory)
	f.groups = access.Groups{Admin: *f.adminGroup, Reader: *f.readerGroup}
	return nil
}

// group parses a group's name or gid. The default, def, may name a group
// this host does not have (it then admits no one); a name given must
// exist, so that a misspelt one is not a group of no one.
func group(def string) func(string) ([]uint32, error) {
	return func(s string) ([]uint32, error) {
		gids, err := access.LookupGroup(s)
		if err == nil && gids == nil && s != "" && s != def {
			err = fmt.Errorf("%q is no group of this host (give a name or gid, or \"\" for none)", s)
		}
		return gids, err
	}
}

// checkSockets checks that the sockets' paths in dir fit a Unix socket.
func checkSockets(dir string) error {
	if p := filepath.Join(dir, access.ReaderSocketFile); len(p) > server.MaxSocketPath {
		return usagef("--data %s: the recorder's socket %s would be longer than the %d bytes a Unix socket's path may have", dir, p, server.MaxSocketPath)
	}
	return nil
}

// options are the server's options: its tokens are the one given, or
// else those kept in dir, made at first start; without dir (the fleet),
// one made now for this run alone.
func (f *serveFlags) options(dir string, logf func(string, ...any)) (server.Options, error) {
	opts := server.Options{Addr: *f.api, Hosts: f.hosts, Groups: f.groups, MaxTraces: *f.maxTraces, MaxTraceBytes: f.traceBytes}
	if *f.api == "" {
		return opts, nil
	}
	opts.Token = f.token.get()
	if dir == "" {
		if opts.Token == "" {
			opts.Token = rand.Text()
		}
		return opts, nil
	}
	load := func(name string, gid []uint32) (string, error) {
		path := filepath.Join(dir, name)
		t, err := access.LoadOrCreateToken(path, gid)
		if err != nil {
			return "", fmt.Errorf("%s: %w", path, err)
		}
		if t.Made != "" {
			logf("made a new API token in %s: %s", path, t.Made)
		}
		return t.Value, nil
	}
	var err error
	if opts.Token == "" {
		if opts.Token, err = load(access.AdminTokenFile, nil); err != nil {
			return opts, err
		}
	}
	var readers []uint32
	if os.Geteuid() == 0 {
		readers = f.groups.Reader
	}
	opts.ReadToken, err = load(access.ReaderTokenFile, readers)
	return opts, err
}

// sockets are the recorder's sockets in dir: the admin's, and the
// readers' when there is a reader group. When a group beside root uses
// them, dir is opened for its members to reach them (access.ShareDir).
func (f *serveFlags) sockets(dir string) ([]server.Socket, error) {
	socks := []server.Socket{{Path: filepath.Join(dir, access.AdminSocketFile), Group: f.groups.Admin, Cap: access.Root}}
	if len(f.groups.Reader) > 0 {
		socks = append(socks, server.Socket{Path: filepath.Join(dir, access.ReaderSocketFile), Group: f.groups.Reader, Cap: access.Reader})
	}
	if len(f.groups.Admin) > 0 || len(f.groups.Reader) > 0 {
		if err := access.ShareDir(dir); err != nil {
			return nil, err
		}
	}
	return socks, nil
}

// runUIURL prints the login URL of the UI serving dir's recording.
func runUIURL(args []string, stdout, stderr io.Writer) error {
	flags := newFlags("ui-url", stderr)
	data := valueFlag(flags, "data", defaultDataDir(), dataHelp, nonEmpty)
	api := valueFlag(flags, "api", "", "the UI's address (default: that of the recorder recording into --data)", apiAddress)
	read := flags.Bool("read", false, "the read-only login, with the reader token (for members of group holter-readers)")
	if err := parse(flags, args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return usagef("unexpected argument %q", flags.Arg(0))
	}
	addr := *api
	if addr == "" {
		info, ok := readAgentInfo(*data)
		switch {
		case !ok:
			return fmt.Errorf("no recorder is running for %s (holter ui prints its login URL when it starts; --api names a UI's address)", *data)
		case info.API == "":
			return fmt.Errorf("the recorder recording into %s (pid %d) serves no UI (it was started with --api \"\")", *data, info.Pid)
		case info.OwnToken && !*read:
			return fmt.Errorf("the recorder recording into %s (pid %d) was started with a token of its own: its UI is %s with that token", *data, info.Pid, server.LoginURL(info.API, "TOKEN"))
		}
		addr = info.API
	}
	name := access.AdminTokenFile
	if *read {
		name = access.ReaderTokenFile
	}
	token, err := access.ReadToken(filepath.Join(*data, name))
	switch {
	case errors.Is(err, fs.ErrPermission) && !*read:
		return fmt.Errorf("%w: only root reads the admin token (members of group holter-readers: holter ui-url --read)", err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: holter record or holter ui makes it when it first serves the UI", err)
	case err != nil:
		return err
	}
	fmt.Fprintln(stdout, server.LoginURL(addr, token))
	return nil
}
