//go:build unix

package server

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
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
	// cut, when set and true, makes every Commit fail without doing
	// anything: the process dies after applying a request, before its
	// reply record is written.
	cut *bool
}

// cutDurable is a durable directory whose Commit can be cut off.
type cutDurable struct {
	*durable.Dir
	cut *bool
}

func (d cutDurable) Commit(spans []memnode.Span, r memnode.ReplyRecord) error {
	if *d.cut {
		return errors.New("killed")
	}
	return d.Dir.Commit(spans, r)
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
	var dur Durable = d
	if n.cut != nil {
		dur = cutDurable{d, n.cut}
	}
	n.s, err = New(Config{Store: st, Segment: 1024, DeadTimeout: time.Second,
		Pool: &PoolServe{Switch: testSwitch, Key: key, Token: testToken, Replies: testSlots,
			Durable: dur, Kept: d.Kept(), KeptReplies: d.KeptReplies()}}, n.host)
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

// TestDurableCutBeforeReply kills a durable node (SyncAlways) after it
// applied a request and before its reply record was written, with the
// request's bytes on disk: what a crash between the two, or a power
// loss after the kernel wrote the bytes back and before the record's
// flush, leaves. The node started again puts the request's bytes back
// (its undo record), so the client's resend is applied once: a FETCHADD
// moves its counter by its operand, a CAS swaps and says so, a parity
// hop is accumulated once, an Adam step (three spans) leaves what one
// step leaves. Without the undo record each would be applied twice.
func TestDurableCutBeforeReply(t *testing.T) {
	at := time.Unix(1000, 0)
	gfHops := wire.AppendChain(nil, []wire.ChainHop{{Addr: testBase + 128, Op: wire.ChainGFAccumulate, Coef: 1}})
	parity := []byte{0x0f, 0xf0, 0x55, 0xaa}
	grads := make([]byte, 64)
	for i := range 16 {
		binary.LittleEndian.PutUint32(grads[4*i:], math.Float32bits(float32(i)-7.5))
	}
	adam := wire.AppendOptim(nil, &wire.OptimParams{Algo: wire.OptimAdam, Step: 1, LR: 0.1, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8})
	reqs := []struct {
		name    string
		h       wire.Header
		payload []byte
		check   func(n *durableNode, a wire.Header) string
	}{
		{"FETCHADD", wire.Header{Op: wire.OpFetchAdd, MsgID: 1, Addr: testBase, Operand1: 7}, nil,
			func(n *durableNode, a wire.Header) string {
				if c := n.word(testBase); a.Operand1 != 0 || c != 7 {
					return fmt.Sprintf("old %d, counter %d; want 0 and 7 (added once)", a.Operand1, c)
				}
				return ""
			}},
		{"CAS", wire.Header{Op: wire.OpCAS, MsgID: 2, Addr: testBase + 8, Operand1: 0, Operand2: 42}, nil,
			func(n *durableNode, a wire.Header) string {
				if w := n.word(testBase + 8); a.Operand1 != 0 || w != 42 {
					return fmt.Sprintf("old %d, word %d; want 0 (it swapped) and 42", a.Operand1, w)
				}
				return ""
			}},
		{"parity hop", wire.Header{Op: wire.OpChain, MsgID: 3, Addr: testBase + 128, Operand1: uint64(len(parity)), Operand2: 1},
			append(gfHops[:len(gfHops):len(gfHops)], parity...),
			func(n *durableNode, a wire.Header) string {
				if got := n.dir.Mem()[testBase+128:][:4]; string(got) != "\x0e\xf2\x56\xae" {
					return fmt.Sprintf("parity % x, want 0e f2 56 ae (accumulated once)", got)
				}
				return ""
			}},
		{"OPTIM Adam", wire.Header{Op: wire.OpOptim, MsgID: 4, Addr: testBase + 1024, Operand1: testBase + 2048, Operand2: testBase + 3072, Dtype: wire.DtypeF32},
			append(adam[:len(adam):len(adam)], grads...), nil},
	}
	// What one Adam step leaves: a node that applies it uncut.
	ref := &durableNode{t: t, path: t.TempDir(), sync: durable.SyncAlways}
	ref.start()
	ref.grant()
	copy(ref.dir.Mem()[testBase+128:], []byte{1, 2, 3, 4})
	r := reqs[3]
	if a, _ := ref.serve(at, clientA, r.h, r.payload); a.Status != wire.StatusOK {
		t.Fatalf("the Adam step: %v", a.Status)
	}
	var once [3][]byte
	for i := range once {
		once[i] = append([]byte(nil), ref.dir.Mem()[testBase+1024*uint64(i+1):][:64]...)
	}
	ref.crash()
	reqs[3].check = func(n *durableNode, a wire.Header) string {
		for i := range once {
			if got := n.dir.Mem()[testBase+1024*uint64(i+1):][:64]; !bytes.Equal(got, once[i]) {
				return fmt.Sprintf("span %d differs from one step's", i)
			}
		}
		return ""
	}

	cut := false
	n := &durableNode{t: t, path: t.TempDir(), sync: durable.SyncAlways, cut: &cut}
	n.start()
	n.grant()
	copy(n.dir.Mem()[testBase+128:], []byte{1, 2, 3, 4})
	for _, r := range reqs {
		cut = true
		if a, _ := n.serve(at, clientA, r.h, r.payload); a.Status != wire.StatusBusy {
			t.Fatalf("%s cut before its reply record: answered %v, want BUSY", r.name, a.Status)
		}
		n.crash()
		cut = false
		n.start()
		a, _ := n.serve(at.Add(time.Second), clientA, r.h, r.payload)
		if a.Status != wire.StatusOK {
			t.Fatalf("%s resent after the restart: %v", r.name, a.Status)
		}
		if msg := r.check(n, a); msg != "" {
			t.Errorf("%s resent after the restart: %s", r.name, msg)
		}
		// Its reply is kept now: a second restart answers it from there.
		n.crash()
		n.start()
		if a, _ := n.serve(at.Add(2*time.Second), clientA, r.h, r.payload); a.Status != wire.StatusOK || n.s.Stats().Pool.Duplicates != 1 {
			t.Errorf("%s resent after a second restart: %v, %d answered from the kept replies", r.name, a.Status, n.s.Stats().Pool.Duplicates)
		}
		if msg := r.check(n, a); msg != "" {
			t.Errorf("%s after a second restart: %s", r.name, msg)
		}
	}
	n.crash()
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
