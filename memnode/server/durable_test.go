package server

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// fakeDurable records what a durable node's server saves and syncs.
type fakeDurable struct {
	saved   []byte         // the last record
	saves   int            // records saved
	begun   []memnode.Span // spans of the requests begun
	syncs   [][2]uint64    // (offset, bytes) committed after writes
	flushes [][2]uint64    // (offset, bytes) flushed before a record
	replies []memnode.ReplyRecord
	aborts  int
	fail    bool // every call fails
}

func (d *fakeDurable) SaveGrants(rec []byte) error {
	if d.fail {
		return errors.New("disk full")
	}
	d.saved, d.saves = append([]byte(nil), rec...), d.saves+1
	return nil
}

func (d *fakeDurable) Flush(off, n uint64) error {
	if d.fail {
		return errors.New("I/O error")
	}
	d.flushes = append(d.flushes, [2]uint64{off, n})
	return nil
}

func (d *fakeDurable) Begin(spans []memnode.Span) error {
	if d.fail {
		return errors.New("I/O error")
	}
	d.begun = append(d.begun, spans...)
	return nil
}

func (d *fakeDurable) Commit(spans []memnode.Span, r memnode.ReplyRecord) error {
	if d.fail {
		return errors.New("I/O error")
	}
	for _, s := range spans {
		d.syncs = append(d.syncs, [2]uint64{s.Off, s.Len})
	}
	d.replies = append(d.replies, r)
	return nil
}

func (d *fakeDurable) Abort() error { d.aborts++; return nil }

// statusHost records the statuses of the answers a server sends.
type statusHost struct {
	nopHost
	replies, raws []wire.Status
}

func (h *statusHost) Reply(_ transport.PeerID, rh *wire.Header, _ []byte) error {
	h.replies = append(h.replies, rh.Status)
	return nil
}

func (h *statusHost) Raw(_ netip.AddrPort, rh *wire.Header, _ []byte) bool {
	h.raws = append(h.raws, rh.Status)
	return true
}

// TestDurableServer checks a durable node's server: a grant's extent is
// flushed and its record saved before it is acknowledged (refused when
// they cannot be), a write's bytes
// are synced before its answer (BUSY when they cannot be), and a server
// started on the saved record serves its grants only once it reported
// them to the switch.
func TestDurableServer(t *testing.T) {
	sw := netip.MustParseAddrPort("10.0.0.1:7471")
	client := netip.MustParseAddrPort("10.0.0.9:5000")
	token := []byte("durable")
	st, key := lentStore(t)
	dur := &fakeDurable{}
	host := &statusHost{}
	newServer := func(kept []memnode.GrantState) *Server {
		s, err := New(Config{Store: st, Segment: 1024, DeadTimeout: time.Second,
			Pool: &PoolServe{Switch: sw, Key: key, Token: token, Durable: dur, Kept: kept}}, host)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := newServer(nil)
	grant := func(region uint32, base uint64) wire.Status {
		t.Helper()
		b, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolGrant, Region: region, Key: 0x77, Base: base, Length: 4096,
			Pool:  ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: uint8(wire.PermAll)},
			Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:7470"), Base: base}}}, token)
		if err != nil {
			t.Fatal(err)
		}
		if !s.servePoolControl(&transport.Delivery{Peer: transport.PeerID{Addr: sw}, Payload: b, MsgDone: true}) {
			t.Fatal("the grant was not taken for one")
		}
		return host.replies[len(host.replies)-1]
	}
	write := func(region uint32, addr uint64, data string) wire.Status {
		t.Helper()
		h := wire.Header{Version: wire.Version, Op: wire.OpWrite, Mode: wire.ModePool, Flags: wire.FlagReplyTo,
			Group: region, Key: 0x77, Addr: addr, MsgID: uint64(len(host.raws) + 1)}
		s.ServePool(time.Unix(100, 0), sw, &h, wire.AppendReplyTo([]byte(data), client))
		if len(host.raws) == 0 {
			return 0xff // dropped
		}
		return host.raws[len(host.raws)-1]
	}

	if st := grant(5, 8192); st != wire.StatusOK || dur.saves != 1 || len(dur.flushes) != 1 || dur.flushes[0] != [2]uint64{8192, 4096} {
		t.Fatalf("grant: %v, %d records saved, flushed %v", st, dur.saves, dur.flushes)
	}
	if st := write(5, 8192+16, "durable!"); st != wire.StatusOK || len(dur.syncs) != 1 || dur.syncs[0] != [2]uint64{8192 + 16, 8} {
		t.Fatalf("write: %v, synced %v", st, dur.syncs)
	}
	dur.fail = true
	if st := grant(6, 16384); st != wire.StatusBusy || s.pool.node.HasGrant(6) || s.Stats().Pool.SyncFailed != 1 {
		t.Fatalf("a grant that could not be flushed: %v, held %v, %+v", st, s.pool.node.HasGrant(6), s.Stats().Pool)
	}
	if st := write(5, 8192, "x"); st != wire.StatusBusy || s.Stats().Pool.SyncFailed != 2 {
		t.Fatalf("a write that could not be synced: %v, %+v", st, s.Stats().Pool)
	}
	dur.fail = false

	kept, err := memnode.ParseGrants(dur.saved)
	if err != nil || len(kept) != 1 || kept[0].Region != 5 {
		t.Fatalf("the saved record: %+v, %v", kept, err)
	}
	s = newServer(kept)
	if !s.PoolKept() {
		t.Fatal("a server started on kept grants does not say so")
	}
	n := len(host.raws)
	write(5, 8192, "early")
	if len(host.raws) != n || s.Stats().Pool.Dropped != 1 {
		t.Fatalf("a request before the report was answered (%d answers, %+v)", len(host.raws)-n, s.Stats().Pool)
	}
	s.PoolReported(42)
	if st := write(5, 8192, "late"); st != wire.StatusOK {
		t.Fatalf("a write after the report: %v", st)
	}
}
