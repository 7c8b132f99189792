package access

import (
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The files in a data directory that admit callers: the recorder's
// sockets, and the tokens of HTTP.
const (
	AdminSocketFile  = "holter.sock"
	ReaderSocketFile = "holter-read.sock"
	AdminTokenFile   = "api.token"
	ReaderTokenFile  = "api-read.token"
)

// minTokenLen is the shortest token kept from a file: rand.Text makes 26
// characters (128 bits).
const minTokenLen = 16

// Token is a token file's content, and why it was made now if it was.
type Token struct {
	Value string
	Made  string // "" when read from the file
}

// LoadOrCreateToken returns the token kept in path. It writes a new one
// there first when there is none, or when the file could have been read
// by others than its owner (this process's user) and, when gid is given,
// that group: the file is made mode 0600, or 0640 with group gid[0].
func LoadOrCreateToken(path string, gid []uint32) (Token, error) {
	made := "there was none"
	if fi, err := os.Stat(path); err == nil {
		if why := untrusted(fi, gid); why != "" {
			made = why
		} else if b, err := os.ReadFile(path); err != nil {
			return Token{}, fmt.Errorf("read token: %w", err)
		} else if v := strings.TrimSpace(string(b)); len(v) >= minTokenLen {
			return Token{Value: v}, nil
		} else {
			made = fmt.Sprintf("%s held no token of at least %d characters", path, minTokenLen)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Token{}, fmt.Errorf("token: %w", err)
	}
	v := rand.Text()
	if err := writeToken(path, v, gid); err != nil {
		return Token{}, err
	}
	return Token{Value: v, Made: made}, nil
}

// untrusted says why a token file may have been read by someone it was
// not meant for, or "".
func untrusted(fi fs.FileInfo, gid []uint32) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	perm := fi.Mode().Perm()
	switch {
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%s is not a regular file", fi.Name())
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Sprintf("%s belonged to another user", fi.Name())
	case perm&0o007 != 0:
		return fmt.Sprintf("%s was readable by others (mode %04o)", fi.Name(), perm)
	case perm&0o070 != 0 && (len(gid) == 0 || st.Gid != gid[0]):
		return fmt.Sprintf("%s was readable by group %d (mode %04o)", fi.Name(), st.Gid, perm)
	}
	return ""
}

// writeToken replaces path by a file holding v, with its mode and group
// set before the token is in it.
func writeToken(path, v string, gid []uint32) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	mode := os.FileMode(0o600)
	if len(gid) > 0 {
		if err := f.Chown(-1, int(gid[0])); err != nil {
			return fmt.Errorf("write token: %w", err)
		}
		mode = 0o640
	}
	if err := f.Chmod(mode); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	if _, err := f.WriteString(v + "\n"); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write token: %w", err)
	}
	return nil
}

// ReadToken reads a token from a file (a token file, or one given with
// --token-file).
func ReadToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read token: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("read token: %s is empty", path)
	}
	if strings.ContainsAny(v, " \t\r\n") {
		return "", fmt.Errorf("read token: %s holds more than one word", path)
	}
	return v, nil
}
