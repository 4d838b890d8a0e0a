//go:build unix

package durable

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/wire"
)

// sampleGrants is a grant table with every field set.
func sampleGrants(epoch uint64) []memnode.GrantState {
	return []memnode.GrantState{{
		Grant: memnode.Grant{Region: 3, Key: 0xfeed, Perm: wire.PermRead | wire.PermWrite, Base: 4096, Len: 8192, Column: 1,
			Layout: memnode.GrantLayout{Size: 16384, Stripe: 4096, Columns: 2, Replicas: 2},
			Homes: []memnode.GrantHome{{Addr: netip.MustParseAddrPort("10.0.0.2:7470"), Base: 0},
				{Addr: netip.MustParseAddrPort("[fd00::3]:7470"), Base: 4096}},
			Epoch: epoch, Fences: []wire.Fence{{ID: 1, Token: 9}}},
		Degraded: true,
	}}
}

// TestDirReopen writes memory and saves grants, closes the directory
// and opens it again: both come back.
func TestDirReopen(t *testing.T) {
	for _, s := range []Sync{SyncAlways, {Every: time.Millisecond}} {
		path := t.TempDir()
		d, err := Open(path, 1<<16, 64, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Fresh() || d.Kept() != nil {
			t.Fatalf("%v: a new directory: fresh %v, kept %v", s, d.Fresh(), d.Kept())
		}
		apply(t, d, 5000, "kept across restarts", sampleReply(1))
		want := sampleGrants(7)
		if err := d.SaveGrants(memnode.AppendGrants(nil, want)); err != nil {
			t.Fatal(err)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d, err = Open(path, 1<<16, 64, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if d.Fresh() || string(d.Mem()[5000:5020]) != "kept across restarts" {
			t.Fatalf("%v: reopened: fresh %v, memory %q", s, d.Fresh(), d.Mem()[5000:5020])
		}
		if got := d.Kept(); !bytes.Equal(memnode.AppendGrants(nil, got), memnode.AppendGrants(nil, want)) || len(got) != 1 || got[0].Homes[1] != want[0].Homes[1] {
			t.Fatalf("%v: grants read back %+v, want %+v", s, got, want)
		}
		d.Close()
	}
}

// TestDirRefuses checks the directories Open refuses: another size,
// a corrupt record, one held by another open.
func TestDirRefuses(t *testing.T) {
	path := t.TempDir()
	d, err := Open(path, 1<<16, 64, SyncAlways, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, 1<<16, 64, SyncAlways, nil); !errors.Is(err, ErrLocked) {
		t.Fatalf("a second open: %v, want ErrLocked", err)
	}
	if err := d.SaveGrants(memnode.AppendGrants(nil, sampleGrants(1))); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := Open(path, 1<<17, 64, SyncAlways, nil); !errors.Is(err, ErrSize) {
		t.Fatalf("another size: %v, want ErrSize", err)
	}
	name := filepath.Join(path, "grants")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[20] ^= 1
	if err := os.WriteFile(name, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, 1<<16, 64, SyncAlways, nil); !errors.Is(err, ErrCorrupt) || !errors.Is(err, memnode.ErrGrantFile) {
		t.Fatalf("a flipped bit in the record: %v, want ErrCorrupt", err)
	}
	// Refused opens hold nothing: a good record opens again.
	if err := os.WriteFile(name, memnode.AppendGrants(nil, sampleGrants(2)), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = Open(path, 1<<16, 64, SyncAlways, nil)
	if err != nil {
		t.Fatalf("after the refusals: %v", err)
	}
	d.Close()
}

// TestDirTornSave leaves a half-written grants.tmp, as a crash in the
// middle of saving does: the next open uses the previous record and
// removes the temporary file.
func TestDirTornSave(t *testing.T) {
	path := t.TempDir()
	d, err := Open(path, 4096, 64, SyncAlways, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.SaveGrants(memnode.AppendGrants(nil, sampleGrants(4))); err != nil {
		t.Fatal(err)
	}
	d.Close()
	newer := memnode.AppendGrants(nil, sampleGrants(5))
	tmp := filepath.Join(path, "grants.tmp")
	if err := os.WriteFile(tmp, newer[:len(newer)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	d, err = Open(path, 4096, 64, SyncAlways, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if k := d.Kept(); len(k) != 1 || k[0].Epoch != 4 {
		t.Fatalf("after a torn save: %+v, want the record of epoch 4", k)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("grants.tmp left: %v", err)
	}
}

func TestParseSync(t *testing.T) {
	for in, want := range map[string]Sync{"always": SyncAlways, "100ms": {Every: 100 * time.Millisecond}, "2s": {Every: 2 * time.Second}} {
		if got, err := ParseSync(in); err != nil || got != want || got.String() != in {
			t.Errorf("ParseSync(%q) = %v (%q), %v", in, got, got.String(), err)
		}
	}
	for _, in := range []string{"", "never", "0s", "-1s", "10us"} {
		if _, err := ParseSync(in); !errors.Is(err, ErrBadSync) {
			t.Errorf("ParseSync(%q): %v, want ErrBadSync", in, err)
		}
	}
}
