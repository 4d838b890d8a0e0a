package memnode

import (
	"bytes"
	"errors"
	"net/netip"
	"reflect"
	"testing"

	"github.com/ndma/ndma/wire"
)

// keptTable is a grant table with a degraded grant, a fenced one and one
// being rebuilt, over a 64 KiB region whose bytes are all set.
func keptTable(t *testing.T) (*Store, *PoolNode) {
	t.Helper()
	s, err := NewStore(Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := s.Alloc(64<<10, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPoolNode(s, key)
	if err != nil {
		t.Fatal(err)
	}
	homes := []GrantHome{{Addr: netip.MustParseAddrPort("10.0.0.2:7470")}, {Addr: netip.MustParseAddrPort("10.0.0.3:7470"), Base: 8192}}
	for i, g := range []Grant{
		{Region: 1, Key: 11, Perm: wire.PermAll, Base: 0, Len: 4096, Layout: GrantLayout{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1}, Homes: homes[:1], Epoch: 2},
		{Region: 2, Key: 22, Perm: wire.PermRead | wire.PermWrite, Base: 8192, Len: 8192, Column: 1, Layout: GrantLayout{Size: 16384, Stripe: 4096, Columns: 2, Replicas: 2},
			Homes: homes, Epoch: 5, Fences: []wire.Fence{{ID: 3, Token: 40}}},
	} {
		if err := p.Grant(g); err != nil {
			t.Fatalf("grant %d: %v", i, err)
		}
	}
	if err := p.GrantRebuild(Grant{Region: 3, Key: 33, Perm: wire.PermAll, Base: 32768, Len: 4096, Layout: GrantLayout{Size: 8192, Stripe: 4096, Columns: 2, Replicas: 2},
		Homes: homes, Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	p.MarkDegraded(2)
	mem := s.regions[key].mem
	for i := range mem {
		mem[i] = byte(i * 7)
	}
	return s, p
}

// TestGrantRecordRestore saves a grant table, reads the record back and
// restores it over the same memory: the same state, and the bytes left
// as they were (Grant would have zeroed them).
func TestGrantRecordRestore(t *testing.T) {
	s, p := keptTable(t)
	rec := AppendGrants(nil, p.State())
	got, err := ParseGrants(rec)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, p.State()) {
		t.Fatalf("read back %+v, want %+v", got, p.State())
	}
	before := bytes.Clone(s.regions[p.Key()].mem)
	q, err := NewPoolNode(s, p.Key())
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Restore(got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(q.State(), p.State()) {
		t.Fatalf("restored %+v, want %+v", q.State(), p.State())
	}
	if !bytes.Equal(s.regions[p.Key()].mem, before) {
		t.Fatal("restoring changed the memory")
	}
	if err := q.Restore(got); !errors.Is(err, ErrGrant) {
		t.Fatalf("restoring over grants: %v, want ErrGrant", err)
	}
	h := wire.Header{Op: wire.OpRead, Group: 2, Key: 22, Addr: 8192, Operand1: 4}
	if res := q.Exec(&h, nil); res.Status != wire.StatusOK || !bytes.Equal(res.Data, before[8192:8196]) {
		t.Fatalf("read of a restored grant: %v %x", res.Status, res.Data)
	}
}

// TestGrantRecordRefused checks the records and tables refused whole.
func TestGrantRecordRefused(t *testing.T) {
	s, p := keptTable(t)
	rec := AppendGrants(nil, p.State())
	for i := range rec {
		bad := bytes.Clone(rec)
		bad[i] ^= 0x10
		if _, err := ParseGrants(bad); !errors.Is(err, ErrGrantFile) {
			t.Fatalf("byte %d flipped: %v, want ErrGrantFile", i, err)
		}
	}
	if _, err := ParseGrants(rec[:len(rec)-1]); !errors.Is(err, ErrGrantFile) {
		t.Fatalf("a truncated record: %v", err)
	}
	gs := p.State()
	gs[1].Base = gs[0].Base + 100 // overlaps region 1
	q, _ := NewPoolNode(s, p.Key())
	if err := q.Restore(gs); !errors.Is(err, ErrGrant) || q.Grants() != 0 {
		t.Fatalf("overlapping grants: %v, %d installed", err, q.Grants())
	}
	gs = p.State()
	gs[2].Len = 1 << 20 // past the region
	if err := q.Restore(gs); !errors.Is(err, ErrGrant) || q.Grants() != 0 {
		t.Fatalf("a grant past the region: %v, %d installed", err, q.Grants())
	}
}

// FuzzParseGrants checks that ParseGrants never panics, and that what
// it accepts encodes back to the same record.
func FuzzParseGrants(f *testing.F) {
	f.Add(AppendGrants(nil, nil))
	f.Add(AppendGrants(nil, []GrantState{{Grant: Grant{Region: 1, Key: 2, Len: 3, Homes: []GrantHome{{Addr: netip.MustParseAddrPort("1.2.3.4:5")}},
		Fences: []wire.Fence{{ID: 1, Token: 2}}}, Degraded: true}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		gs, err := ParseGrants(b)
		if err != nil {
			return
		}
		if again := AppendGrants(nil, gs); !bytes.Equal(again, b) {
			t.Fatalf("record %x encodes back as %x", b, again)
		}
	})
}
