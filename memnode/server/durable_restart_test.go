//go:build unix

package server

import (
	"encoding/binary"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/durable"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// answerHost records the headers (and data) of the answers a server
// sends to clients.
type answerHost struct {
	nopHost
	answers []wire.Header
	data    [][]byte
}

func (h *answerHost) Reply(transport.PeerID, *wire.Header, []byte) error { return nil }

func (h *answerHost) Raw(_ netip.AddrPort, rh *wire.Header, b []byte) bool {
	h.answers = append(h.answers, *rh)
	h.data = append(h.data, append([]byte(nil), b...))
	return true
}

// durableNode is a memory node on a real durable directory (package
// memnode/durable), started and crashed by the test. A crash closes
// the directory without anything else: what a killed process leaves is
// the mapped files as it wrote them (the page cache), which is what
// the next open maps whether or not they were flushed.
type durableNode struct {
	t    *testing.T
	path string
	sync durable.Sync
	dir  *durable.Dir
	s    *Server
	host *answerHost
}

const (
	testSlots     = 64 // the journal's and the reply cache's entries
	testRegion    = 5
	testRegionKey = 0x77
	testBase      = 8192 // the grant's extent in the lent memory
)

var (
	testSwitch = netip.MustParseAddrPort("10.0.0.1:7471")
	testToken  = []byte("durable")
)

// start opens the directory and starts a server on it: with the grants
// and replies it kept, reported to the switch (so it serves them).
func (n *durableNode) start() {
	t := n.t
	t.Helper()
	d, err := durable.Open(n.path, 1<<16, testSlots, n.sync, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		t.Fatal(err)
	}
	key, err := st.Register(d.Mem(), wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	n.host = &answerHost{}
	n.s, err = New(Config{Store: st, Segment: 1024, DeadTimeout: time.Second,
		Pool: &PoolServe{Switch: testSwitch, Key: key, Token: testToken, Replies: testSlots,
			Durable: d, Kept: d.Kept(), KeptReplies: d.KeptReplies()}}, n.host)
	if err != nil {
		t.Fatal(err)
	}
	n.dir = d
	if len(d.Kept()) > 0 {
		n.s.PoolReported(1)
	}
}

// crash stops the node without answering anything more.
func (n *durableNode) crash() {
	n.t.Helper()
	if err := n.dir.Close(); err != nil {
		n.t.Fatal(err)
	}
	n.s, n.dir = nil, nil
}

// grant gives the node region testRegion over [testBase, +4096).
func (n *durableNode) grant() {
	t := n.t
	t.Helper()
	b, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolGrant, Region: testRegion, Key: testRegionKey, Base: testBase, Length: 4096,
		Pool:  ctrl.PoolSpec{Size: 4096, Stripe: 4096, Columns: 1, Replicas: 1, Perm: uint8(wire.PermAll)},
		Homes: []ctrl.PoolHome{{Addr: netip.MustParseAddrPort("10.0.0.2:7470"), Base: testBase}}}, testToken)
	if err != nil {
		t.Fatal(err)
	}
	if !n.s.servePoolControl(&transport.Delivery{Peer: transport.PeerID{Addr: testSwitch}, Payload: b, MsgDone: true}) {
		t.Fatal("the grant was not taken for one")
	}
}

// serve has the node execute h (from client, with payload) at now and
// returns its answer.
func (n *durableNode) serve(now time.Time, client netip.AddrPort, h wire.Header, payload []byte) (wire.Header, []byte) {
	n.t.Helper()
	h.Version, h.Mode, h.Flags, h.Group, h.Key = wire.Version, wire.ModePool, h.Flags|wire.FlagReplyTo, testRegion, testRegionKey
	before := len(n.host.answers)
	n.s.ServePool(now, testSwitch, &h, wire.AppendReplyTo(append([]byte(nil), payload...), client))
	if len(n.host.answers) != before+1 {
		n.t.Fatalf("%v from %v: %d answers", h.Op, client, len(n.host.answers)-before)
	}
	return n.host.answers[before], n.host.data[before]
}

func (n *durableNode) word(addr uint64) uint64 {
	return binary.LittleEndian.Uint64(n.dir.Mem()[addr:])
}

var (
	clientA = netip.MustParseAddrPort("10.0.0.9:5000")
	clientB = netip.MustParseAddrPort("[fd00::9]:5001")
)

// TestDurableResendAfterRestart applies mutating requests on a durable
// node, loses their answers and crashes the node; the node started
// again on its directory answers each resend as it answered the first
// time, without applying it again: a FETCHADD moves its counter once,
// a CAS that swapped says so, a WRITE resent after another client's
// later write leaves that write in place, a parity hop (GF accumulate:
// applied twice it would undo itself) is applied once. A record older
// than the reply cache's TTL is not answered, as in memory.
func TestDurableResendAfterRestart(t *testing.T) {
	for _, sync := range []durable.Sync{durable.SyncAlways, {Every: time.Hour}} {
		t.Run(sync.String(), func(t *testing.T) {
			n := &durableNode{t: t, path: t.TempDir(), sync: sync}
			n.start()
			n.grant()
			at := time.Unix(1000, 0)
			fadd := wire.Header{Op: wire.OpFetchAdd, MsgID: 1, Addr: testBase, Operand1: 7}
			cas := wire.Header{Op: wire.OpCAS, MsgID: 2, Addr: testBase + 8, Operand1: 0, Operand2: 42}
			write := wire.Header{Op: wire.OpWrite, MsgID: 3, Addr: testBase + 64}
			parity := []byte{0x0f, 0xf0, 0x55, 0xaa}
			hops := wire.AppendChain(nil, []wire.ChainHop{{Addr: testBase + 128, Op: wire.ChainGFAccumulate, Coef: 1}})
			chain := wire.Header{Op: wire.OpChain, MsgID: 4, Addr: testBase + 128, Operand1: uint64(len(parity)), Operand2: 1}
			copy(n.dir.Mem()[testBase+128:], []byte{1, 2, 3, 4})
			// Applied; the answers are lost.
			n.serve(at, clientA, fadd, nil)
			n.serve(at, clientA, cas, nil)
			n.serve(at, clientA, write, []byte("AAAA"))
			if a, _ := n.serve(at, clientA, chain, append(hops[:len(hops):len(hops)], parity...)); a.Status != wire.StatusOK {
				t.Fatalf("the parity hop: %v", a.Status)
			}
			n.crash()

			n.start()
			at = at.Add(time.Second)
			if w, _ := n.serve(at, clientB, wire.Header{Op: wire.OpWrite, MsgID: 3, Addr: testBase + 64}, []byte("BBBB")); w.Status != wire.StatusOK {
				t.Fatalf("the other client's write: %v", w.Status)
			}
			if a, _ := n.serve(at, clientA, fadd, nil); a.Status != wire.StatusOK || a.Operand1 != 0 {
				t.Errorf("the FETCHADD resent: %v, old %d, want OK and 0", a.Status, a.Operand1)
			}
			if a, _ := n.serve(at, clientA, cas, nil); a.Status != wire.StatusOK || a.Operand1 != 0 {
				t.Errorf("the CAS resent: %v, old %d, want OK and 0 (it swapped)", a.Status, a.Operand1)
			}
			if a, _ := n.serve(at, clientA, write, []byte("AAAA")); a.Status != wire.StatusOK {
				t.Errorf("the WRITE resent: %v", a.Status)
			}
			if a, _ := n.serve(at, clientA, chain, append(hops[:len(hops):len(hops)], parity...)); a.Status != wire.StatusOK {
				t.Errorf("the parity hop resent: %v", a.Status)
			}
			if got := n.s.Stats().Pool.Duplicates; got != 4 {
				t.Errorf("%d resends answered from the kept replies, want 4", got)
			}
			if c, w := n.word(testBase), n.word(testBase+8); c != 7 || w != 42 {
				t.Errorf("counter %d (want 7: added once), CAS word %d (want 42)", c, w)
			}
			if got := string(n.dir.Mem()[testBase+64:][:4]); got != "BBBB" {
				t.Errorf("the later write's bytes: %q, want BBBB (the resend must not undo it)", got)
			}
			if got := n.dir.Mem()[testBase+128:][:4]; string(got) != "\x0e\xf2\x56\xae" {
				t.Errorf("the parity bytes: % x, want 0e f2 56 ae (accumulated once)", got)
			}
			if a, _ := n.serve(at, clientA, wire.Header{Op: wire.OpFetchAdd, MsgID: 5, Addr: testBase, Operand1: 1}, nil); a.Operand1 != 7 {
				t.Errorf("a new FETCHADD: old %d, want 7", a.Operand1)
			}
			n.crash()

			// Past the TTL (30 s): the records are not answered.
			n.start()
			if a, _ := n.serve(at.Add(time.Minute), clientA, fadd, nil); a.Operand1 != 8 || n.s.Stats().Pool.Duplicates != 0 {
				t.Errorf("a resend past the TTL: old %d, %d duplicates; want it applied (old 8)", a.Operand1, n.s.Stats().Pool.Duplicates)
			}
			n.crash()
		})
	}
}

// TestDurableRepliesBounded floods a durable node with FETCHADDs of
// distinct clients and ids: the journal file keeps its size, and the
// node started again keeps exactly the newest records (its cache's
// capacity), the older ones being applied again if resent.
func TestDurableRepliesBounded(t *testing.T) {
	n := &durableNode{t: t, path: t.TempDir(), sync: durable.SyncAlways}
	n.start()
	n.grant()
	name := filepath.Join(n.path, "replies")
	size := func() int64 {
		fi, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	want := int64(durable.ReplyJournalLen(testSlots))
	at := time.Unix(1000, 0)
	const flood = 5 * testSlots
	for i := range flood {
		c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1000+i))
		n.serve(at, c, wire.Header{Op: wire.OpFetchAdd, MsgID: uint64(i + 1), Addr: testBase, Operand1: 1}, nil)
		if i%testSlots == 0 && size() != want {
			t.Fatalf("after %d requests the journal holds %d bytes, want %d", i+1, size(), want)
		}
	}
	n.crash()
	n.start()
	defer n.crash()
	if got := len(n.dir.KeptReplies()); got != testSlots || size() != want {
		t.Fatalf("kept %d records in %d bytes, want %d in %d", got, size(), testSlots, want)
	}
	for _, i := range []int{flood - 1, flood - testSlots} {
		c := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), uint16(1000+i))
		if a, _ := n.serve(at, c, wire.Header{Op: wire.OpFetchAdd, MsgID: uint64(i + 1), Addr: testBase, Operand1: 1}, nil); a.Operand1 != uint64(i) {
			t.Errorf("request %d resent: old %d, want %d", i+1, a.Operand1, i)
		}
	}
	if c := n.word(testBase); c != flood {
		t.Errorf("counter %d, want %d", c, flood)
	}
}
