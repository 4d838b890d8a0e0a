package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReplace checks replace: nothing changes at the path until Commit;
// Abort leaves the old file (or none) and no temporary file; a committed
// file keeps the replaced file's mode (or gets the one asked for, or
// os.Create's for a new one); a symlink's target is replaced, not the
// link; a device is written in place.
func TestReplace(t *testing.T) {
	dir := t.TempDir()
	list := func() []string {
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		return names
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Mode().Perm()
	}

	old := filepath.Join(dir, "old")
	if err := os.WriteFile(old, []byte("old"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(old, 0o640); err != nil {
		t.Fatal(err)
	}
	r, err := replace(old, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if got := read(old); got != "old" {
		t.Fatalf("before Commit the path holds %q", got)
	}
	r.Abort()
	r.Abort()
	if got, names := read(old), list(); got != "old" || len(names) != 1 {
		t.Fatalf("after Abort: %q, directory %v", got, names)
	}

	r, err = replace(old, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("new")); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	r.Abort() // after Commit: nothing
	if got, m, names := read(old), mode(old), list(); got != "new" || m != 0o640 || len(names) != 1 {
		t.Fatalf("after Commit: %q mode %v, directory %v", got, m, names)
	}
	if err := r.Commit(); err == nil {
		t.Fatal("a second Commit: no error")
	}

	// A new file gets os.Create's mode; one asked for 0600 gets it even
	// over a file that had another.
	fresh := filepath.Join(dir, "fresh")
	if r, err = replace(fresh, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	ref, err := os.Create(filepath.Join(dir, "ref"))
	if err != nil {
		t.Fatal(err)
	}
	ref.Close()
	if m, want := mode(fresh), mode(ref.Name()); m != want {
		t.Fatalf("new file mode %v, os.Create gives %v", m, want)
	}
	if r, err = replace(old, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if m := mode(old); m != 0o600 {
		t.Fatalf("replace with 0600 over a 0640 file: mode %v", m)
	}

	// Through a symlink: the target is replaced, the link stays.
	link := filepath.Join(dir, "link")
	if err := os.Symlink("fresh", link); err != nil {
		t.Fatal(err)
	}
	if r, err = replace(link, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("via link")); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 || read(fresh) != "via link" {
		t.Fatalf("replace through a symlink: link %v (%v), target %q", fi.Mode(), err, read(fresh))
	}

	// A device is written in place and stays a device.
	if r, err = replace(os.DevNull, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := r.Commit(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Fatalf("%s after replace: %v %v", os.DevNull, fi.Mode(), err)
	}

	if _, err := replace(filepath.Join(dir, "no-such-dir", "f"), 0); err == nil {
		t.Fatal("replace in a missing directory: no error")
	}
}
