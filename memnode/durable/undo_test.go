//go:build unix

package durable

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
)

// TestUndo opens directories a request was cut in, under SyncAlways:
// begun and applied but its reply record not written (a crash, or a
// power loss after its bytes reached the disk), its bytes are put back
// and said so; committed, they stay; a request begun that changed
// nothing (aborted) leaves no record to put back over bytes a grant
// then changed; a torn record is skipped; a record whose journal was
// discarded is left as it is, and said so. Under an interval nothing
// is recorded.
func TestUndo(t *testing.T) {
	var buf bytes.Buffer
	begin := func(d *Dir, off uint64, data string) {
		t.Helper()
		if err := d.Begin([]memnode.Span{{Off: off, Len: uint64(len(data))}, {Off: 4090, Len: 100}}); err != nil {
			t.Fatal(err)
		}
		copy(d.Mem()[off:], data)
	}
	mem := func(d *Dir, off uint64, n int) string { return string(d.Mem()[off:][:n]) }

	path := t.TempDir()
	d := openLogged(t, path, &buf)
	apply(t, d, 100, "committed", sampleReply(1))
	copy(d.Mem()[4090:], "tail..")
	begin(d, 100, "cut short")
	d.Mem()[4095] = '!'
	d.Close() // the bytes are on disk, the reply record is not
	buf.Reset()
	d = openLogged(t, path, &buf)
	if got := mem(d, 100, 9); got != "committed" || mem(d, 4090, 6) != "tail.." || !strings.Contains(buf.String(), "put back") {
		t.Fatalf("a request cut before its reply record: memory %q %q, log %q", got, mem(d, 4090, 6), buf.String())
	}
	if n := len(d.KeptReplies()); n != 1 {
		t.Fatalf("%d replies kept, want 1", n)
	}
	// The record is used once: a second open has nothing to undo.
	apply(t, d, 100, "resent!!!", sampleReply(2))
	d.Close()
	buf.Reset()
	d = openLogged(t, path, &buf)
	if got := mem(d, 100, 9); got != "resent!!!" || buf.Len() != 0 {
		t.Fatalf("after the resend: memory %q, log %q", got, buf.String())
	}

	// Aborted, then a grant scrubs the bytes: they stay scrubbed.
	begin(d, 200, "")
	if err := d.Abort(); err != nil {
		t.Fatal(err)
	}
	copy(d.Mem()[200:], "scrubbed")
	if err := d.Flush(200, 8); err != nil {
		t.Fatal(err)
	}
	begin(d, 300, "applied")
	if err := d.Commit([]memnode.Span{{Off: 300, Len: 7}}, sampleReply(3)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	buf.Reset()
	d = openLogged(t, path, &buf)
	if mem(d, 200, 8) != "scrubbed" || mem(d, 300, 7) != "applied" || buf.Len() != 0 {
		t.Fatalf("aborted then scrubbed, then committed: %q %q, log %q", mem(d, 200, 8), mem(d, 300, 7), buf.String())
	}

	// A torn record: its request was not applied yet.
	begin(d, 400, "xx")
	d.Close()
	undo := filepath.Join(path, "undo")
	b, err := os.ReadFile(undo)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(undo, b[:len(b)-3], 0o600); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	d = openLogged(t, path, &buf)
	if mem(d, 400, 2) != "xx" || !strings.Contains(buf.String(), "torn") {
		t.Fatalf("a torn record: memory %q, log %q", mem(d, 400, 2), buf.String())
	}

	// The journal discarded (damaged header): the record cannot be
	// judged, and is left.
	begin(d, 500, "yy")
	d.Close()
	jn := filepath.Join(path, "replies")
	if b, err = os.ReadFile(jn); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if err := os.WriteFile(jn, b, 0o600); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	d = openLogged(t, path, &buf)
	if mem(d, 500, 2) != "yy" || !strings.Contains(buf.String(), "left as they are") {
		t.Fatalf("with the journal discarded: memory %q, log %q", mem(d, 500, 2), buf.String())
	}
	d.Close()

	// Under an interval a request writes no undo record.
	path = t.TempDir()
	d, err = Open(path, 4096, 8, Sync{Every: time.Hour}, nil)
	if err != nil {
		t.Fatal(err)
	}
	begin(d, 100, "interval")
	d.Close()
	if fi, err := os.Stat(filepath.Join(path, "undo")); err != nil || fi.Size() != 0 {
		t.Fatalf("under an interval the undo file: %v, %v", fi, err)
	}
}
