//go:build unix

package secretfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestModes checks that a secret file is read only when group and others
// have no permission on it, and that the refusal says how to fix it.
func TestModes(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		mode os.FileMode
		want string // "" accepted; else in the error
	}{
		{0o600, ""},
		{0o400, ""},
		{0o700, ""},
		{0o644, "is readable by others (mode 0644): chmod 600 "},
		{0o640, "is readable by others (mode 0640)"},
		{0o604, "is readable by others (mode 0604)"},
		{0o620, "is writable by others (mode 0620)"},
		{0o602, "is writable by others (mode 0602)"},
		{0o666, "is readable and writable by others (mode 0666)"},
		{0o610, "is accessible by others (mode 0610)"},
	} {
		p := filepath.Join(dir, "tok")
		if err := os.WriteFile(p, []byte("secret\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, tc.mode); err != nil {
			t.Fatal(err)
		}
		b, err := ReadFile(p, "token file")
		if tc.want == "" {
			if err != nil || string(b) != "secret\n" {
				t.Errorf("mode %04o: %q, %v; want the contents", tc.mode, b, err)
			}
			continue
		}
		var ee *ExposedError
		if !errors.Is(err, ErrExposed) || !errors.As(err, &ee) || b != nil {
			t.Errorf("mode %04o: %q, %v; want an *ExposedError", tc.mode, b, err)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, "token file "+p+" ") || !strings.Contains(msg, tc.want) {
			t.Errorf("mode %04o: error %q, want %q in it", tc.mode, msg, tc.want)
		}
		if !strings.HasSuffix(err.Error(), "chmod 600 "+p) {
			t.Errorf("mode %04o: error %q does not end with the chmod to run", tc.mode, err)
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("mode %04o: error %q shows the contents", tc.mode, err)
		}
	}
}

// TestSymlink checks that the file a link leads to is the one checked,
// and that the message names both and the chmod fixes the target.
func TestSymlink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "real")
	if err := os.WriteFile(target, []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	_, err := ReadFile(link, "key file")
	want := "key file " + link + " (" + target + ") is readable by others (mode 0644): chmod 600 " + target
	if err == nil || err.Error() != want {
		t.Fatalf("through a link (links are mode 0777 themselves): %v; want %q", err, want)
	}
	if err := os.Chmod(target, 0o600); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(link, "key file"); err != nil || string(b) != "s" {
		t.Fatalf("a link to a 0600 file: %q, %v", b, err)
	}
}

// TestOwner checks that a file owned by another user is refused unless
// the process runs as root, posing as users with other uids than the
// file's owner (the test's own uid).
func TestOwner(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "tok")
	if err := os.WriteFile(p, []byte("s"), 0o600); err != nil {
		t.Fatal(err)
	}
	me := os.Geteuid()
	if _, err := ReadFile(p, "token file"); err != nil {
		t.Fatalf("own 0600 file: %v", err)
	}
	defer func() { geteuid = os.Geteuid }()
	other := me + 1000
	geteuid = func() int { return other }
	_, err := ReadFile(p, "token file")
	want := fmt.Sprintf("token file %s belongs to uid %d, not to this user (uid %d): a secret must belong to the user who uses it (or run as root)", p, me, other)
	if !errors.Is(err, ErrExposed) || err.Error() != want {
		t.Fatalf("as uid %d: %v; want %q", other, err, want)
	}
	// Root reads anyone's secret file: as root, one of uid 4242's.
	geteuid = func() int { return 0 }
	if me == 0 {
		if err := os.Chown(p, 4242, 4242); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ReadFile(p, "token file"); err != nil {
		t.Fatalf("as root: %v; root may read anyone's secret file", err)
	}
}

// TestMissing checks that a file that is not there is the os error.
func TestMissing(t *testing.T) {
	_, err := ReadFile(filepath.Join(t.TempDir(), "none"), "token file")
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("%v, want os.ErrNotExist", err)
	}
}

// TestWriteNew writes a secret file only its owner may read, refuses to
// overwrite one, and the file written reads back through ReadFile.
func TestWriteNew(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	if err := WriteNew(path, "test file", []byte("s3cret")); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v", fi.Mode(), err)
	}
	if err := WriteNew(path, "test file", []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("overwrote an existing file: %v", err)
	}
	if b, err := ReadFile(path, "test file"); err != nil || string(b) != "s3cret" {
		t.Fatalf("read back %q, %v", b, err)
	}
}
