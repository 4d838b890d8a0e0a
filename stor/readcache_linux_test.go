package stor

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestReadAtCached: readAt returns what os.File.ReadAt does — from the
// page cache, after the cache is dropped (the blocking fallback), across
// the end of the file (io.EOF with what is there) and at offsets past
// 4 GiB (a sparse file).
func TestReadAtCached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 1<<20)
	for i := range data {
		data[i] = byte(rng.Uint32())
	}
	const far = 5 << 30
	if _, err := f.WriteAt(data, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(data[:8192], far); err != nil {
		t.Fatal(err)
	}
	check := func(what string, off int64, n int) {
		t.Helper()
		got, want := make([]byte, n), make([]byte, n)
		gn, gerr := readAt(f, got, off)
		wn, werr := f.ReadAt(want, off)
		if gn != wn || !bytes.Equal(got[:gn], want[:wn]) || !errors.Is(gerr, werr) && !(gerr == nil && werr == nil) {
			t.Errorf("%s: readAt(%d, %d) = %d, %v; ReadAt: %d, %v", what, off, n, gn, gerr, wn, werr)
		}
	}
	for range 50 {
		n := 1 + rng.IntN(64<<10)
		check("cached", int64(rng.IntN(len(data)-n)), n)
	}
	check("past 4 GiB", far+100, 4096)
	check("across the end", far+8192-100, 4096)
	check("past the end", far+1<<20, 4096)
	check("empty", 0, 0)
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	check("uncached", 12345, 64<<10)
	if _, err := readAt(f, make([]byte, 10), far+1<<20); !errors.Is(err, io.EOF) {
		t.Errorf("read past the end: %v, want io.EOF", err)
	}
}
