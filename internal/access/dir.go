package access

import (
	"fmt"
	"os"
	"path/filepath"
)

// ShareDir lets the members of the socket groups reach the sockets in
// dir, which root alone may enter otherwise (the store makes it 0750):
// others may search it, not list it, and lose what they could do to the
// entries in it, so that each file's own mode and group say who may use
// it. Files made later should be made without others' bits (umask 027).
func ShareDir(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	for _, e := range entries {
		info, err := e.Info()
		if err != nil || e.Type()&os.ModeSymlink != 0 || info.Mode().Perm()&0o007 == 0 {
			continue
		}
		if err := os.Chmod(filepath.Join(dir, e.Name()), info.Mode().Perm()&^0o007); err != nil {
			return fmt.Errorf("share %s: %w", dir, err)
		}
	}
	if err := os.Chmod(dir, fi.Mode().Perm()&^0o006|0o001); err != nil {
		return fmt.Errorf("share %s: %w", dir, err)
	}
	return nil
}
