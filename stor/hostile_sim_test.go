package stor

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// TestSimHostileRequests sends a storage node crafted requests — garbage,
// out-of-range and oversized reads, reads asking for versions that never
// come, writes and joins without the lease, leases too long, volumes too
// big, requests for another node — and checks that each is refused with
// the code that says why, that none takes a node longer than its bounded
// wait, and that a real writer and reader are unaffected.
func TestSimHostileRequests(t *testing.T) {
	simStorage(t, 3, 7, func(t *testing.T, s *simStor) {
		c := s.client()
		ctx := s.ctx()
		d, v, m, rng := s.writtenVolume(c, VolumeSpec{Name: "h", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 3})

		evil := s.client()
		ask := func(node uint16, key uint64, req []byte) (Code, []byte) {
			t.Helper()
			resp, err := evil.ep.Anycast(ctx, s.swA.String(), nodeName(DefaultService, node), key, req, s.fab)
			if err != nil {
				t.Fatalf("node %d answered no reply: %v", node, err)
			}
			if len(resp) == 0 {
				t.Fatalf("node %d: empty reply", node)
			}
			return Code(resp[0]), resp[1:]
		}
		expect := func(what string, want Code, req []byte) {
			t.Helper()
			if got, msg := ask(0, 1, req); got != want {
				t.Errorf("%s: answered %d (%s), want %d", what, got, msg, want)
			}
		}
		// Garbage of every request type: 300 requests that take arguments.
		for sent := 0; sent < 300; {
			b := make([]byte, rng.IntN(64))
			for i := range b {
				b[i] = byte(rng.Uint32())
			}
			if len(b) > 0 && rng.IntN(2) == 0 {
				b[0] = byte(1 + rng.IntN(opCatList+3))
			}
			if len(b) > 0 && (b[0] == opList || b[0] == opInfo || b[0] == opCatList) {
				continue // no arguments: any body is a valid request
			}
			sent++
			if got, _ := ask(0, 1, b); got == CodeOK {
				t.Errorf("garbage %x answered OK", b)
			}
		}
		read := func(off uint64, n uint32, minVer uint64) []byte {
			return (&readReq{Name: "h", Off: off, Len: n, MinVer: minVer}).append(nil)
		}
		expect("read past the end", CodeOutOfRange, read(d.Size, 1, 0))
		expect("read across an extent", CodeOutOfRange, read(MinExtent-1, 2, 0))
		expect("read far away", CodeOutOfRange, read(1<<62, 4096, 0))
		expect("read too large", CodeTooLarge, read(0, MaxIO+1, 0))
		expect("read of no volume", CodeNoVolume, (&readReq{Name: "nope", Len: 1}).append(nil))
		start := time.Now()
		expect("read of a version never written", CodeNotReady, read(0, 1, 1<<62))
		if w := time.Since(start); w > readWait+time.Second {
			t.Errorf("a read waiting for a version took %v, want about %v", w, readWait)
		}
		expect("write without the lease", CodeLeaseHeld, (&oneReq{Name: "h", Holder: 42, Ver: 1 << 40, Data: []byte("x")}).append(nil, opWriteOne))
		expect("flush without the lease", CodeLeaseHeld, (&oneReq{Name: "h", Holder: 42}).append(nil, opFlushOne))
		jb, _ := json.Marshal(joinReq{Name: "h", Holder: 42, Epoch: 1 << 40, Set: "x", Job: "stor.wevil", Size: 2, Rank: 1})
		expect("join without the lease", CodeLeaseHeld, append([]byte{opJoin}, jb...))
		lb, _ := json.Marshal(leaseReq{Name: "h", Holder: 42, TTLMs: int64(time.Hour / time.Millisecond)})
		expect("lease of an hour", CodeBadRequest, append([]byte{opLease}, lb...))
		lb, _ = json.Marshal(leaseReq{Name: "h", Holder: 42, TTLMs: 1000})
		expect("lease held by another", CodeLeaseHeld, append([]byte{opLease}, lb...))
		var rm enc
		rm.u8(opRemove)
		rm.str("h")
		rm.u8(0)
		expect("remove of a volume open for writing", CodeLeaseHeld, rm.b)
		many, _ := json.Marshal(Descriptor{Name: "many", Size: (MaxExtents + 1) * MinExtent, Extent: MinExtent, Replicas: 1, Nodes: []uint16{0}, Created: 1})
		expect("volume of more extents than allowed", CodeBadRequest, append([]byte{opCreate}, many...))
		big, _ := json.Marshal(Descriptor{Name: "big", Size: 1 << 62, Extent: MaxExtent, Replicas: 1, Nodes: []uint16{0}, Created: 1})
		expect("volume larger than a file can be", CodeBadRequest, append([]byte{opCreate}, big...))
		other, _ := json.Marshal(Descriptor{Name: "o", Size: MinExtent, Extent: MinExtent, Replicas: 1, Nodes: []uint16{1}, Created: 1})
		expect("volume placed on other nodes", CodeBadRequest, append([]byte{opCreate}, other...))
		if got, _ := ask(0, 3, []byte{opInfo}); got != CodeWrongNode {
			t.Errorf("a request for node 2 at node 0: answered %d, want WRONG_NODE", got)
		}
		// The switch refuses a request for a service that does not exist.
		if _, err := evil.ep.Anycast(ctx, s.swA.String(), "stor.n999", 1000, []byte{opInfo}, s.fab); !errors.Is(err, wire.StatusNotMember) {
			t.Errorf("request to no service: %v", err)
		}
		// The writer and readers are unaffected.
		m.write(t, v, rng, 123, 3*MinExtent)
		s.flushAndClose(v, d, m)
		if st := s.nodes[0].Stats(); st.Refused < 300 {
			t.Errorf("node 0 counted %d refusals", st.Refused)
		}
	})
}

// TestSimCapacity: a volume that does not fit a node's capacity is
// refused with NO_SPACE, and nothing of it is left anywhere.
func TestSimCapacity(t *testing.T) {
	simStorage(t, 2, 8, func(t *testing.T, s *simStor) {
		s.stopNode(1)
		s.startNodeWith(1, 4*MinExtent)
		c := s.client()
		ctx := s.ctx()
		if _, err := c.Create(ctx, VolumeSpec{Name: "fits", Size: 4 * MinExtent, Extent: MinExtent, Replicas: 2}); err != nil {
			t.Fatal(err)
		}
		_, err := c.Create(ctx, VolumeSpec{Name: "toobig", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 2})
		if !errors.Is(err, ErrNoSpace) {
			t.Fatalf("create beyond node 1's capacity: %v, want ErrNoSpace", err)
		}
		vs, err := c.List(ctx)
		if err != nil || len(vs) != 1 || vs[0].Name != "fits" {
			t.Fatalf("volumes after the refused create: %+v, %v", vs, err)
		}
		if _, err := c.Remove(ctx, "fits", false); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Create(ctx, VolumeSpec{Name: "toobig", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 2}); err != nil {
			t.Fatalf("create after the space was freed: %v", err)
		}
	})
}
