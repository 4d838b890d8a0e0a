//go:build unix

package durable

import (
	"bytes"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/wire"
)

// sampleReply is record i: clients of both families, every field set.
func sampleReply(i int) memnode.ReplyRecord {
	c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), uint16(4000+i))
	if i%2 == 1 {
		c = netip.AddrPortFrom(netip.MustParseAddr("fd00::1").Next(), uint16(4000+i))
	}
	return memnode.ReplyRecord{Client: c, ID: uint64(1000 + i), Hop: uint8(i % 3), Status: wire.StatusOK,
		Old: uint64(i) << 40, At: time.Unix(1700000000, int64(i))}
}

func sameReplies(t *testing.T, got, want []memnode.ReplyRecord) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d records, want %d", len(got), len(want))
	}
	for i := range got {
		g, w := got[i], want[i]
		if g.Client != w.Client || g.ID != w.ID || g.Hop != w.Hop || g.Status != w.Status || g.Old != w.Old || !g.At.Equal(w.At) {
			t.Fatalf("record %d: %+v, want %+v", i, g, w)
		}
	}
}

// apply does what a node does for a request writing data at off whose
// reply is r: Begin, the write, Commit.
func apply(t testing.TB, d *Dir, off uint64, data string, r memnode.ReplyRecord) {
	t.Helper()
	span := []memnode.Span{{Off: off, Len: uint64(len(data))}}
	if err := d.Begin(span); err != nil {
		t.Fatal(err)
	}
	copy(d.Mem()[off:], data)
	if err := d.Commit(span, r); err != nil {
		t.Fatal(err)
	}
}

// openLogged opens path (8 reply slots) with its log in buf.
func openLogged(t *testing.T, path string, buf *bytes.Buffer) *Dir {
	t.Helper()
	d, err := Open(path, 4096, 8, SyncAlways, slog.New(slog.NewTextHandler(buf, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestRepliesReopen adds more records than the journal has slots,
// under both policies: the file keeps its size, and the directory
// opened again gives back the newest, oldest first.
func TestRepliesReopen(t *testing.T) {
	for _, s := range []Sync{SyncAlways, {Every: time.Hour}} {
		path := t.TempDir()
		d, err := Open(path, 4096, 8, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		var all []memnode.ReplyRecord
		for i := range 100 {
			all = append(all, sampleReply(i))
			apply(t, d, uint64(i%512)*8, "applied!", all[i])
		}
		d.Close()
		if fi, err := os.Stat(filepath.Join(path, "replies")); err != nil || fi.Size() != int64(ReplyJournalLen(8)) {
			t.Fatalf("%v: the journal: %v, %v; want %d bytes", s, fi.Size(), err, ReplyJournalLen(8))
		}
		d, err = Open(path, 4096, 8, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameReplies(t, d.KeptReplies(), all[92:])
		// Numbering goes on from the newest record kept.
		apply(t, d, 0, "x", sampleReply(100))
		d.Close()
		d, _ = Open(path, 4096, 8, s, nil)
		sameReplies(t, d.KeptReplies(), append(all[93:], sampleReply(100)))
		d.Close()
	}
}

// TestRepliesDamaged opens journals a crash or a disk damaged: a torn
// record is skipped, and a journal cut short, with a bad header, of
// another slot count or beside new memory is discarded; each is said
// in the log, and the journal works again after.
func TestRepliesDamaged(t *testing.T) {
	path := t.TempDir()
	name := filepath.Join(path, "replies")
	var buf bytes.Buffer
	fill := func() {
		d := openLogged(t, path, &buf)
		for i := range 3 {
			apply(t, d, 0, "x", sampleReply(i))
		}
		d.Close()
	}
	damage := func(f func(b []byte) []byte) {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(name, f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
		kept   int
		log    string
	}{
		{"torn record", func(b []byte) []byte { b[2*ReplyRecordLen+20] ^= 0x40; return b }, 2, "1 torn or corrupt records skipped"},
		{"cut short", func(b []byte) []byte { return b[:3*ReplyRecordLen+7] }, 0, "cut short"},
		{"bad header", func(b []byte) []byte { b[9] ^= 1; return b }, 0, "no valid header"},
		{"other slots", func([]byte) []byte {
			b := make([]byte, ReplyJournalLen(16))
			putReplyHeader(b, 16)
			r := sampleReply(0)
			putReply(b[ReplyRecordLen:], 1, &r)
			return b
		}, 0, "another cache size"},
		{"empty file", func([]byte) []byte { return nil }, 0, "discarded"},
	} {
		fill()
		damage(tc.damage)
		buf.Reset()
		d := openLogged(t, path, &buf)
		if got := len(d.KeptReplies()); got != tc.kept || !strings.Contains(buf.String(), tc.log) {
			t.Fatalf("%s: kept %d records (want %d), log %q (want %q)", tc.name, got, tc.kept, buf.String(), tc.log)
		}
		apply(t, d, 0, "x", sampleReply(7))
		d.Close()
		d = openLogged(t, path, &buf)
		if got := d.KeptReplies(); len(got) != tc.kept+1 || got[len(got)-1].ID != sampleReply(7).ID {
			t.Fatalf("%s: after the damage, a new record: kept %+v", tc.name, got)
		}
		d.Close()
		if err := os.Remove(name); err != nil {
			t.Fatal(err)
		}
	}
	fill()
	if err := os.Remove(filepath.Join(path, "memory")); err != nil {
		t.Fatal(err)
	}
	buf.Reset()
	d := openLogged(t, path, &buf)
	defer d.Close()
	if len(d.KeptReplies()) != 0 || !strings.Contains(buf.String(), "the memory file is new") {
		t.Fatalf("beside new memory: kept %d, log %q", len(d.KeptReplies()), buf.String())
	}
}

// BenchmarkSyncAlways is what a write of 8 bytes costs a node under
// SyncAlways: its bytes flushed; its bytes and reply record (Commit);
// and all a request does, its undo record saved first (Begin) (set
// TMPDIR to a directory on the disk to measure; tmpfs flushes nothing).
func BenchmarkSyncAlways(b *testing.B) {
	for _, name := range []string{"bytes", "bytes+reply", "undo+bytes+reply"} {
		b.Run(name, func(b *testing.B) {
			d, err := Open(b.TempDir(), 1<<20, 1<<14, SyncAlways, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer d.Close()
			r := sampleReply(1)
			for i := 0; b.Loop(); i++ {
				span := []memnode.Span{{Off: uint64(i%(1<<17)) * 8, Len: 8}}
				if name == "undo+bytes+reply" {
					if err := d.Begin(span); err != nil {
						b.Fatal(err)
					}
				}
				d.Mem()[span[0].Off]++
				r.ID++
				if name == "bytes" {
					err = d.Flush(span[0].Off, 8)
				} else {
					err = d.Commit(span, r)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
