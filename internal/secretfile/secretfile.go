// Package secretfile opens files that hold secrets (fabric tokens, region
// keys) only when no one but their owner can read or change them, the
// check ssh makes of a private key: a secret another user can read is no
// longer a secret, and one another user can write is theirs to choose.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrExposed is matched (errors.Is) by the error of a secret file that
// others may read or write, or that belongs to another user. See
// ExposedError.
var ErrExposed = errors.New("secret file exposed")

// ExposedError is the error of a secret file refused for its permissions
// or its owner.
type ExposedError struct {
	// What names the file's role ("token file", "key file") and Path is
	// the path as given; Target is where its symbolic links lead (the
	// file whose mode and owner were checked), or Path.
	What, Path, Target string
	// Mode is the file's mode bits.
	Mode fs.FileMode
	// Owner is the file's owner and User the user running the process
	// (their uids), when the owner is the fault; -1 otherwise.
	Owner, User int
}

func (e *ExposedError) Error() string {
	name := e.Path
	if e.Target != e.Path {
		name = fmt.Sprintf("%s (%s)", e.Path, e.Target)
	}
	if e.Owner >= 0 {
		return fmt.Sprintf("%s %s belongs to uid %d, not to this user (uid %d): a secret must belong to the user who uses it (or run as root)",
			e.What, name, e.Owner, e.User)
	}
	perm := e.Mode.Perm()
	how := "accessible"
	switch {
	case perm&0o044 != 0 && perm&0o022 != 0:
		how = "readable and writable"
	case perm&0o044 != 0:
		how = "readable"
	case perm&0o022 != 0:
		how = "writable"
	}
	return fmt.Sprintf("%s %s is %s by others (mode %04o): chmod 600 %s", e.What, name, how, perm, e.Target)
}

// Is makes errors.Is(err, ErrExposed) true.
func (e *ExposedError) Is(target error) bool { return target == ErrExposed }

// ReadFile reads the secret file at path after Check has accepted it.
// what names the file's role in messages ("token file").
func ReadFile(path, what string) ([]byte, error) {
	f, err := Open(path, what)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(f)
}

// Open opens the secret file at path for reading, following symbolic
// links, and refuses it (closing it; an *ExposedError) when its group or
// others have any permission on it, or when it belongs to another user
// and the process does not run as root. The checks are made on the
// opened file, so the file checked is the file read.
func Open(path, what string) (*os.File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if err := check(path, what, fi); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// geteuid is os.Geteuid; tests pose as another user.
var geteuid = os.Geteuid

func check(path, what string, fi fs.FileInfo) error {
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	if modeBits && fi.Mode().Perm()&0o077 != 0 {
		return &ExposedError{What: what, Path: path, Target: target, Mode: fi.Mode(), Owner: -1, User: -1}
	}
	if owner, ok := fileOwner(fi); ok {
		if user := geteuid(); user != 0 && owner != user {
			return &ExposedError{What: what, Path: path, Target: target, Mode: fi.Mode(), Owner: owner, User: user}
		}
	}
	return nil
}

// WriteNew writes b to a new file at path that only its owner may read
// or write (mode 0600); an existing file is not overwritten, and a file
// half written is removed. what names the file's role in messages.
func WriteNew(path, what string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("%s %s: %w", what, path, err)
	}
	return nil
}
