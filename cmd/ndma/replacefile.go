package main

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
)

// replacement is a file being written that replaces the file at its path
// only once committed: the bytes go to a temporary file in the same
// directory, which Commit syncs and renames over the path, and Abort
// removes. A path that names something other than a regular file (a
// device such as /dev/stdout, a pipe) is written in place instead.
type replacement struct {
	*os.File
	path    string // where Commit puts the file (symlinks followed)
	inPlace bool   // File is path itself: nothing to rename or remove
	done    bool   // committed or aborted
}

// replace opens a replacement for path. The file gets mode perm, or, when
// perm is zero, the mode of the file it replaces (0666 less the umask for
// a new one).
func replace(path string, perm fs.FileMode) (*replacement, error) {
	target := path
	if t, err := filepath.EvalSymlinks(path); err == nil {
		target = t
	}
	fi, err := os.Stat(target)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		f, err := os.OpenFile(target, os.O_WRONLY, 0)
		if err != nil {
			return nil, err
		}
		return &replacement{File: f, path: target, inPlace: true}, nil
	case err == nil && perm == 0:
		perm = fi.Mode().Perm()
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	dir, base := filepath.Split(target)
	for range 10 {
		tmp := filepath.Join(dir, "."+base+".tmp-"+strconv.FormatUint(rand.Uint64(), 36))
		create := perm
		if create == 0 {
			create = 0o666 // less the umask
		}
		f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, create)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%s: temporary file: %w", path, err)
		}
		if perm != 0 {
			// The umask may have taken bits away; the replaced file's
			// mode (or the one asked for) is what the new one gets.
			if err := f.Chmod(perm); err != nil {
				f.Close()
				os.Remove(tmp)
				return nil, err
			}
		}
		return &replacement{File: f, path: target}, nil
	}
	return nil, fmt.Errorf("%s: no free temporary file name in %s", path, dir)
}

// Commit syncs the file and renames it over the path.
func (r *replacement) Commit() error {
	if r.done {
		return errors.New("replacement already committed or aborted")
	}
	r.done = true
	if r.inPlace {
		return r.File.Close()
	}
	err := r.File.Sync()
	if cerr := r.File.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(r.File.Name(), r.path)
	}
	if err != nil {
		os.Remove(r.File.Name())
	}
	return err
}

// Abort removes the temporary file and leaves the path as it was; after
// Commit it does nothing.
func (r *replacement) Abort() {
	if r.done {
		return
	}
	r.done = true
	r.File.Close()
	if !r.inPlace {
		os.Remove(r.File.Name())
	}
}
