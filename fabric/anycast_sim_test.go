package fabric_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Anycast through the simulated fabric: service members register with the
// switch, clients (plain cores, not members) post KindAnycast requests,
// and the switch picks a member per request by the service's policy.

// anyServer wraps a service member so that it answers each request after
// a simulated service time, one request at a time (a FIFO single server
// in virtual time), instead of at once as simMember.serve does.
type anyServer struct {
	m       *simMember
	rank    int
	svc     func(r *endpoint.Request) time.Duration // service time of one request
	queue   []anyPending                            // deadlines non-decreasing
	busy    time.Time                               // when the server is free
	served  int
	pending int // requests taken in, not yet answered
}

type anyPending struct {
	r  *endpoint.Request
	at time.Time
}

func (s *anyServer) Receive(now time.Time, d netio.Datagram) { s.m.Receive(now, d) }

func (s *anyServer) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	for _, r := range s.m.core.Requests() {
		start := s.busy
		if start.Before(now) {
			start = now
		}
		s.busy = start.Add(s.svc(r))
		s.queue = append(s.queue, anyPending{r, s.busy})
		s.pending++
	}
	for len(s.queue) > 0 && !now.Before(s.queue[0].at) {
		r := s.queue[0].r
		s.queue = s.queue[1:]
		if err := s.m.core.Reply(r, anyEcho(s.rank, r.Data), wire.StatusOK); err != nil {
			s.m.f.t.Errorf("seed %d: member %d reply: %v", s.m.f.seed, s.rank, err)
		}
		s.served++
		s.pending--
	}
	out, next := s.m.Poll(now, out)
	if len(s.queue) > 0 && (next.IsZero() || s.queue[0].at.Before(next)) {
		next = s.queue[0].at
	}
	return out, next
}

// anyEcho is a server's reply: its rank (2 bytes, big-endian) and the
// request.
func anyEcho(rank int, req []byte) []byte {
	b := binary.BigEndian.AppendUint16(make([]byte, 0, 2+len(req)), uint16(rank))
	return append(b, req...)
}

// anyServers puts each of ms behind an anyServer (re-attached at the same
// address); it must be called before ms send anything.
func anyServers(f *simFabric, ms []*simMember, svc func(rank int, r *endpoint.Request) time.Duration) []*anyServer {
	var ss []*anyServer
	for i, m := range ms {
		s := &anyServer{m: m, rank: i, svc: func(r *endpoint.Request) time.Duration { return svc(i, r) }}
		f.net.Detach(m.addr)
		f.net.Attach(m.addr, s, f.link, f.link)
		ss = append(ss, s)
	}
	return ss
}

// anyRegister registers ms as the members of service name (rank = index)
// and returns the service's group id. Heartbeats flow from then on.
func (f *simFabric) anyRegister(name string, ms []*simMember, p ctrl.Policy, ranges []ctrl.Range) uint32 {
	f.t.Helper()
	var gid uint32
	n := 0
	for i, m := range ms {
		req := &ctrl.Msg{Type: ctrl.Register, Service: name, Size: len(ms), Rank: i, Policy: uint8(p), Ranges: ranges}
		m.control(req, func(r *ctrl.Msg, err error) {
			if err != nil {
				f.t.Fatalf("seed %d: register %s rank %d: %v", f.seed, name, i, err)
			}
			if r.Member != uint16(i) {
				f.t.Fatalf("seed %d: register %s rank %d: got member %d", f.seed, name, i, r.Member)
			}
			m.core.SetMember(r.Group, r.Member)
			m.groups = append(m.groups, r.Group)
			m.member[r.Group] = r.Member
			if n > 0 && r.Group != gid {
				f.t.Fatalf("seed %d: register %s: groups %d and %d", f.seed, name, gid, r.Group)
			}
			gid = r.Group
			n++
		})
	}
	f.run(func() bool { return n == len(ms) }, time.Minute, "register "+name)
	return gid
}

// anyDrive posts total anycast requests to service gid from clients, each
// keeping window requests in flight, and waits for all to complete. mk
// makes request i (its affinity key and payload); check sees each
// completed op (op.Buf is the request, op.Resp the reply).
func anyDrive(f *simFabric, clients []*simMember, gid uint32, total, window int,
	mk func(i int) (uint64, []byte), check func(i int, op *endpoint.Op)) {
	f.t.Helper()
	issued, done := 0, 0
	var issue func(c *simMember)
	issue = func(c *simMember) {
		if issued == total {
			return
		}
		i := issued
		issued++
		key, req := mk(i)
		op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: gid, Addr: key, Buf: req, Timeout: time.Minute}
		c.post(op, func(op *endpoint.Op) {
			check(i, op)
			done++
			issue(c)
		})
	}
	for _, c := range clients {
		for range window {
			issue(c)
		}
	}
	f.run(func() bool { return done == total }, 10*time.Minute, fmt.Sprintf("%d anycast requests", total))
}

// anyCheckEcho fails the test unless op succeeded with the echo of its
// request from member want (any member if want < 0); it returns the member
// that answered.
func anyCheckEcho(f *simFabric, op *endpoint.Op, want int) int {
	if op.Err != nil {
		f.t.Fatalf("seed %d: anycast: %v", f.seed, op.Err)
	}
	if len(op.Resp) < 2 || !bytes.Equal(op.Resp[2:], op.Buf) {
		f.t.Fatalf("seed %d: anycast reply of %d bytes is not the echo of the %d-byte request", f.seed, len(op.Resp), len(op.Buf))
	}
	got := int(binary.BigEndian.Uint16(op.Resp))
	if want >= 0 && got != want {
		f.t.Fatalf("seed %d: key %#x answered by member %d, want %d", f.seed, op.Addr, got, want)
	}
	return got
}

func anySeqReq(i int) (uint64, []byte) {
	return 0, binary.BigEndian.AppendUint64(nil, uint64(i))
}

// TestSimAnycastLeastOutstanding: 100 000 requests from 8 clients with 8
// in flight each over 4 equal members (random service times, 50–150 µs)
// spread within 10%; a member 3 times slower gets fewer than half of what
// each fast one gets.
func TestSimAnycastLeastOutstanding(t *testing.T) {
	run := func(t *testing.T, seed int64, total int, slow int) []int {
		f := newSimFabric(t, seed, impaired(0), fabric.Config{})
		srv := f.addMembers(4)
		clients := f.addMembers(8)
		r := rand.New(rand.NewPCG(uint64(seed), 11))
		ss := anyServers(f, srv, func(rank int, _ *endpoint.Request) time.Duration {
			d := 50*time.Microsecond + time.Duration(r.Int64N(int64(100*time.Microsecond)))
			if rank == slow {
				d *= 3
			}
			return d
		})
		gid := f.anyRegister("lo", srv, ctrl.PolicyLeastOutstanding, nil)
		replies := make([]int, len(srv))
		anyDrive(f, clients, gid, total, 8, anySeqReq, func(_ int, op *endpoint.Op) {
			replies[anyCheckEcho(f, op, -1)]++
		})
		served := make([]int, len(ss))
		for i, s := range ss {
			served[i] = s.served
		}
		if !slices.Equal(served, replies) {
			t.Fatalf("seed %d: members served %v, clients got replies from %v", seed, served, replies)
		}
		t.Logf("seed %d: %d requests, per member %v, virtual %v", seed, total, served, f.net.Elapsed())
		return served
	}
	t.Run("equal", func(t *testing.T) {
		total := 100000
		if testing.Short() {
			total = 20000
		}
		served := run(t, 41, total, -1)
		lo, hi := slices.Min(served), slices.Max(served)
		ratio := float64(hi) / float64(lo)
		t.Logf("max/min = %d/%d = %.4f [limit 1.1]", hi, lo, ratio)
		if ratio > 1.1 {
			t.Errorf("max/min requests per member %.4f, want <= 1.1: %v", ratio, served)
		}
	})
	t.Run("slow", func(t *testing.T) {
		served := run(t, 42, 20000, 3)
		fast := slices.Min(served[:3])
		t.Logf("slow member %d vs fastest-least %d = %.3f [limit 0.5]", served[3], fast, float64(served[3])/float64(fast))
		if 2*served[3] >= fast {
			t.Errorf("slow member got %d requests, fast ones %v: want fewer than half", served[3], served[:3])
		}
	})
}

// TestSimAnycastRoundRobin: every member gets exactly 1/n of the requests,
// also with loss, reordering, duplication and corruption on every link
// (retransmitted request packets stay pinned to their member).
func TestSimAnycastRoundRobin(t *testing.T) {
	for _, n := range []int{2, 4, 16, 64} {
		for _, loss := range []float64{0, 0.05, 0.2} {
			t.Run(fmt.Sprintf("members=%d/loss=%v", n, loss), func(t *testing.T) {
				seed := int64(50 + 1000*n + int(loss*100))
				f := newSimFabric(t, seed, impaired(loss), fabric.Config{})
				srv := f.addMembers(n)
				clients := f.addMembers(4)
				served := make([]int, len(srv))
				for i, m := range srv {
					m.serve = func(r *endpoint.Request) ([]byte, error) {
						served[i]++
						return anyEcho(i, r.Data), nil
					}
				}
				gid := f.anyRegister("rr", srv, ctrl.PolicyRoundRobin, nil)
				total := 2000 * len(srv)
				if loss >= 0.2 || n >= 16 {
					total = 50 * len(srv)
				}
				replies := make([]int, len(srv))
				anyDrive(f, clients, gid, total, 4, anySeqReq, func(_ int, op *endpoint.Op) {
					replies[anyCheckEcho(f, op, -1)]++
				})
				t.Logf("per member %v, virtual %v", served, f.net.Elapsed())
				for i := range served {
					if served[i] != total/len(srv) || replies[i] != total/len(srv) {
						t.Fatalf("seed %d: members served %v, replies from %v; want exactly %d each", seed, served, replies, total/len(srv))
					}
				}
			})
		}
	}
}

func anyQuarter() []ctrl.Range {
	var rs []ctrl.Range
	for i := range 4 {
		end := uint64(i+1) << 62
		if i == 3 {
			end = math.MaxUint64
		}
		rs = append(rs, ctrl.Range{Start: uint64(i) << 62, End: end, Owner: int32(i), Replicas: []int32{int32((i + 1) % 4)}})
	}
	return rs
}

func anyRandKey(r *rand.Rand) uint64 {
	for {
		if k := r.Uint64(); k != math.MaxUint64 { // owned by no range
			return k
		}
	}
}

// TestSimAnycastAffinity: every request lands on the owner of its key.
// When an owner crashes, the requests it holds fail with StatusMemberDead
// within the heartbeat timeout; then its keys go to its replica and the
// other ranges are unaffected.
func TestSimAnycastAffinity(t *testing.T) {
	seed := int64(61)
	const hbTimeout = time.Second
	f := newSimFabric(t, seed, impaired(0), fabric.Config{HeartbeatTimeout: hbTimeout})
	srv := f.addMembers(4)
	clients := f.addMembers(2)
	r := rand.New(rand.NewPCG(uint64(seed), 13))
	ss := anyServers(f, srv, func(int, *endpoint.Request) time.Duration { return 2 * time.Millisecond })
	gid := f.anyRegister("kv", srv, ctrl.PolicyKeyAffinity, anyQuarter())
	owner := func(k uint64) int { return int(k >> 62) }

	// All alive: 100% on the owner.
	randReq := func(int) (uint64, []byte) {
		k := anyRandKey(r)
		return k, binary.BigEndian.AppendUint64(nil, k)
	}
	per := make([]int, 4)
	anyDrive(f, clients, gid, 4000, 16, randReq, func(_ int, op *endpoint.Op) {
		per[anyCheckEcho(f, op, owner(op.Addr))]++
	})
	t.Logf("all alive: per owner %v", per)

	// 16 requests per range in flight; member 1 crashes while it holds
	// some of them.
	const perRange = 16
	var ops []*endpoint.Op
	at := map[*endpoint.Op]time.Duration{}
	for i := range 4 * perRange {
		k := uint64(i%4)<<62 | r.Uint64()>>2
		op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: gid, Addr: k, Buf: binary.BigEndian.AppendUint64(nil, k), Timeout: time.Minute}
		ops = append(ops, op)
		clients[i%2].post(op, func(op *endpoint.Op) { at[op] = f.net.Elapsed() })
	}
	base := ss[1].served
	f.run(func() bool { return ss[1].served-base >= 3 && ss[1].pending > 0 }, time.Minute, "member 1 busy")
	crashAt := f.net.Elapsed()
	heldAtCrash := ss[1].pending
	f.crash(srv[1])
	// Requests for its keys posted after the crash, before the switch
	// notices, also fail rather than hang.
	f.net.RunFor(10 * time.Millisecond)
	late := 0
	for i := range 4 {
		k := 1<<62 | r.Uint64()>>2
		op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: gid, Addr: k, Buf: binary.BigEndian.AppendUint64(nil, k), Timeout: time.Minute}
		ops = append(ops, op)
		late++
		clients[i%2].post(op, func(op *endpoint.Op) { at[op] = f.net.Elapsed() })
	}
	f.run(func() bool { return len(at) == len(ops) }, time.Minute, "requests in flight to a crashed owner")
	failed := 0
	for _, op := range ops {
		if owner(op.Addr) != 1 || op.Err == nil {
			anyCheckEcho(f, op, owner(op.Addr))
			continue
		}
		failed++
		if !errors.Is(op.Err, wire.StatusMemberDead) {
			t.Fatalf("seed %d: request to the crashed owner failed with %v, want StatusMemberDead", seed, op.Err)
		}
		if took := at[op] - crashAt; took > hbTimeout+hbTimeout/2 {
			t.Fatalf("seed %d: request to the crashed owner failed %v after the crash; heartbeat timeout %v", seed, took, hbTimeout)
		}
	}
	t.Logf("crash: member 1 held %d requests, %d more posted after the crash; %d failed with StatusMemberDead (last %v after the crash)", heldAtCrash, late, failed, slices.Max(slices.Collect(func(yield func(time.Duration) bool) {
		for _, d := range at {
			if !yield(d - crashAt) {
				return
			}
		}
	})))
	if failed < heldAtCrash+late {
		t.Fatalf("seed %d: %d requests failed, member 1 held %d at the crash", seed, failed, heldAtCrash)
	}

	// The switch has declared it dead: its keys go to member 2.
	alive := f.sw.Groups()[0].Alive // the service is the only group
	if alive[1] || !alive[0] || !alive[2] || !alive[3] {
		t.Fatalf("seed %d: switch sees members alive %v", seed, alive)
	}
	clear(per)
	anyDrive(f, clients, gid, 4000, 16, randReq, func(_ int, op *endpoint.Op) {
		want := owner(op.Addr)
		if want == 1 {
			want = 2
		}
		per[anyCheckEcho(f, op, want)]++
	})
	t.Logf("member 1 dead: per member %v", per)
	if per[1] != 0 || per[2] < per[0] {
		t.Fatalf("seed %d: per member %v after member 1 died", seed, per)
	}
}

// anyXform is the reply the lossy test's servers give: the CRC-32 of the
// request, then the request reversed and masked, then filler of a length
// that depends on the request's, so replies and requests differ in size.
func anyXform(req []byte) []byte {
	n := len(req)
	out := binary.BigEndian.AppendUint32(make([]byte, 0, 4+n+(n%5)*1500), crc32.ChecksumIEEE(req))
	for i := range n {
		out = append(out, req[n-1-i]^0xa5)
	}
	for i := range (n % 5) * 1500 {
		out = append(out, byte(i*31+n))
	}
	return out
}

// TestSimAnycastLossy: 5% loss with reordering, duplication and corruption
// on every link; 2000 requests of 0..30 KB (several packets each way at
// MTU 9000) all get the right reply.
func TestSimAnycastLossy(t *testing.T) {
	seed := int64(71)
	f := newSimFabric(t, seed, impaired(0.05), fabric.Config{})
	srv := f.addMembers(4)
	clients := f.addMembers(4)
	served := make([]int, len(srv))
	for i, m := range srv {
		m.serve = func(r *endpoint.Request) ([]byte, error) {
			served[i]++
			return anyXform(r.Data), nil
		}
	}
	gid := f.anyRegister("lossy", srv, ctrl.PolicyLeastOutstanding, nil)
	r := rand.New(rand.NewPCG(uint64(seed), 17))
	const total = 2000
	multi := 0
	// The first sizes are the edges: empty, one byte, around one full
	// packet and two, the largest.
	pkt := 9000 - wire.HeaderLen
	edges := []int{0, 1, pkt - 1, pkt, pkt + 1, 2*pkt - 4, 2 * pkt, 2*pkt + 1, 30000}
	anyDrive(f, clients, gid, total, 8, func(i int) (uint64, []byte) {
		if i < len(edges) {
			return 0, randBytes(r, edges[i])
		}
		return 0, randBytes(r, r.IntN(30001))
	}, func(i int, op *endpoint.Op) {
		if op.Err != nil {
			t.Fatalf("seed %d: request %d (%d bytes): %v", seed, i, len(op.Buf), op.Err)
		}
		if !bytes.Equal(op.Resp, anyXform(op.Buf)) {
			t.Fatalf("seed %d: request %d (%d bytes): wrong reply of %d bytes", seed, i, len(op.Buf), len(op.Resp))
		}
		if len(op.Buf) > 9000 && len(op.Resp) > 9000 {
			multi++
		}
	})
	sum := 0
	for _, n := range served {
		sum += n
	}
	if sum != total {
		t.Fatalf("seed %d: members served %v = %d requests, want %d (each exactly once)", seed, served, sum, total)
	}
	net := f.net.Stats()
	t.Logf("per member %v, %d multi-packet both ways, virtual %v, network dropped %d, switch anycast in/out %d/%d",
		served, multi, f.net.Elapsed(), net.Dropped(), f.sw.Stats().AnycastIn, f.sw.Stats().AnycastOut)
}

// TestSimAnycastAcksRide: on anycast streams, whose both ends are
// engines (the client's to the switch, the switch's to the member), the
// ACKs ride on data: a client issuing one request at a time sends one
// datagram per request (its ACK of the last reply rides on the next
// request), the members' and the switch's ACKs of requests ride on the
// replies, the switch's of replies on the next requests; nothing is
// retransmitted, and a request costs a few tens of microseconds of
// virtual time, not a retransmission timeout.
func TestSimAnycastAcksRide(t *testing.T) {
	seed := int64(71)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	srv := f.addMembers(2)
	clients := f.addMembers(1)
	for i, m := range srv {
		m.serve = func(r *endpoint.Request) ([]byte, error) { return anyEcho(i, r.Data), nil }
	}
	gid := f.anyRegister("acks", srv, ctrl.PolicyRoundRobin, nil)
	const total = 400
	before := []endpoint.Stats{clients[0].core.Stats(), srv[0].core.Stats(), srv[1].core.Stats()}
	swBefore := f.sw.Stats().Transport
	start := f.net.Elapsed()
	anyDrive(f, clients, gid, total, 1, anySeqReq, func(_ int, op *endpoint.Op) { anyCheckEcho(f, op, -1) })
	per := (f.net.Elapsed() - start) / total
	for i, c := range []*simMember{clients[0], srv[0], srv[1]} {
		a, b := before[i].Transport, c.core.Stats().Transport
		alone := (b.AcksSent - b.AcksPiggybacked) - (a.AcksSent - a.AcksPiggybacked)
		riding := b.AcksPiggybacked - a.AcksPiggybacked
		retx := b.PacketsRetransmitted - a.PacketsRetransmitted
		t.Logf("endpoint %d: %d ACKs riding, %d alone, %d retransmitted", i, riding, alone, retx)
		if retx != 0 {
			t.Errorf("seed %d: endpoint %d retransmitted %d packets", seed, i, retx)
		}
		// Each member serves total/2 requests; a few ACKs (the last one,
		// one due when no data goes out) may still travel alone.
		want := uint64(total / 2)
		if i == 0 {
			want = total
		}
		if riding < want*9/10 || alone > want/10 {
			t.Errorf("seed %d: endpoint %d: %d ACKs rode on data and %d went alone over %d requests", seed, i, riding, alone, want)
		}
	}
	// The switch holds its ACK of a request for the reply it relays, and
	// its ACK of a member's reply for the next request to that member.
	a, b := swBefore, f.sw.Stats().Transport
	if alone, riding := (b.AcksSent-b.AcksPiggybacked)-(a.AcksSent-a.AcksPiggybacked), b.AcksPiggybacked-a.AcksPiggybacked; riding < 2*total*9/10 || alone > 2*total/10 {
		t.Errorf("seed %d: switch: %d ACKs rode on data and %d went alone over %d requests", seed, riding, alone, total)
	} else {
		t.Logf("switch: %d ACKs riding, %d alone", riding, alone)
	}
	if per > 200*time.Microsecond {
		t.Errorf("seed %d: %v of virtual time per request", seed, per)
	}
	t.Logf("%v of virtual time per request", per)
}

// TestSimAnycastSlowReplyAck: a member that takes 5 ms to answer: the
// switch's and the member's ACKs of the request, held for a reply to
// ride on, go alone after transport.MaxAckDelay, within the client's and
// the switch's retransmission timeouts (which allow for that delay):
// nothing is resent.
func TestSimAnycastSlowReplyAck(t *testing.T) {
	seed := int64(72)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	srv := f.addMembers(1)
	clients := f.addMembers(1)
	anyServers(f, srv, func(int, *endpoint.Request) time.Duration { return 5 * time.Millisecond })
	gid := f.anyRegister("slow", srv, ctrl.PolicyRoundRobin, nil)
	const total = 50
	cb, sb, swb := clients[0].core.Stats().Transport, srv[0].core.Stats().Transport, f.sw.Stats().Transport
	anyDrive(f, clients, gid, total, 1, anySeqReq, func(_ int, op *endpoint.Op) { anyCheckEcho(f, op, 0) })
	ca, sa, swa := clients[0].core.Stats().Transport, srv[0].core.Stats().Transport, f.sw.Stats().Transport
	if n := ca.PacketsRetransmitted - cb.PacketsRetransmitted + swa.PacketsRetransmitted - swb.PacketsRetransmitted + sa.PacketsRetransmitted - sb.PacketsRetransmitted; n != 0 {
		t.Errorf("seed %d: %d packets resent (client %d, switch %d, member %d)", seed, n,
			ca.PacketsRetransmitted-cb.PacketsRetransmitted, swa.PacketsRetransmitted-swb.PacketsRetransmitted, sa.PacketsRetransmitted-sb.PacketsRetransmitted)
	}
	if alone := (swa.AcksSent - swa.AcksPiggybacked) - (swb.AcksSent - swb.AcksPiggybacked); alone < total {
		t.Errorf("seed %d: the switch sent %d ACKs of their own over %d slow requests; want one per request at least", seed, alone, total)
	}
}

// slowLinks gives ms access links of rate bits/s (the fabric's link
// otherwise); it must be called before they send anything.
func (f *simFabric) slowLinks(ms []*simMember, rate float64) {
	l := f.link
	l.Rate = rate
	for _, m := range ms {
		f.net.Detach(m.addr)
		f.net.Attach(m.addr, m, l, l)
	}
}

// anyMiB makes request i: 1 MiB of random bytes starting with i.
func anyMiB(r *rand.Rand) func(i int) (uint64, []byte) {
	return func(i int) (uint64, []byte) {
		b := randBytes(r, 1<<20)
		binary.BigEndian.PutUint64(b, uint64(i))
		return 0, b
	}
}

// TestSimAnycastRelayBackpressure: four clients on 1 Gbit/s links each
// keep eight 1 MiB requests in flight to one member behind a 100 Mbit/s
// link — eight times what its link takes. The switch holds the clients
// back (it leaves their fragments unacknowledged while its queue toward
// the member is long, so that they are resent later) instead of failing
// the requests whose fragments find the queue full: every request is
// answered, none refused.
func TestSimAnycastRelayBackpressure(t *testing.T) {
	seed := int64(73)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	srv := f.addMembers(1)
	clients := f.addMembers(4)
	f.slowLinks(srv, 1e8)
	srv[0].serve = func(r *endpoint.Request) ([]byte, error) { return anyEcho(0, r.Data[:8]), nil }
	gid := f.anyRegister("big", srv, ctrl.PolicyLeastOutstanding, nil)
	const total = 64
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	failed := 0
	anyDrive(f, clients, gid, total, 8, anyMiB(r), func(i int, op *endpoint.Op) {
		if op.Err != nil {
			failed++
			t.Logf("request %d: %v", i, op.Err)
			return
		}
		if len(op.Resp) != 10 || !bytes.Equal(op.Resp[2:], op.Buf[:8]) {
			t.Errorf("seed %d: request %d: reply %x", seed, i, op.Resp)
		}
	})
	st := f.sw.Stats()
	t.Logf("virtual %v, switch: anycast refused %d, forward dropped %d, held back %d", f.net.Elapsed(), st.AnycastRefused, st.ForwardDropped, st.AnycastHeld)
	if failed > 0 {
		t.Errorf("seed %d: %d of %d requests failed", seed, failed, total)
	}
	if st.AnycastHeld == 0 || st.ForwardDropped != 0 || st.AnycastPending != 0 {
		t.Errorf("seed %d: switch held back %d fragments, dropped %d relaying, %d requests pending; want some held, none dropped or pending", seed, st.AnycastHeld, st.ForwardDropped, st.AnycastPending)
	}
	// The member's link (64 MiB at 100 Mbit/s: 5.4 s) stays busy.
	if limit := 7 * time.Second; f.net.Elapsed() > limit {
		t.Errorf("seed %d: %v of virtual time for what the member's link takes in 5.4 s", seed, f.net.Elapsed())
	}
}

// TestSimAnycastHeldMemberCrashes: the switch is holding clients back
// behind a slow member's long queue when that member crashes. Nothing
// waits for ever: the switch counts the member dead, forgets its queue,
// fails the requests it held for it (MEMBER_DEAD), and the fragments it
// held back go to the other member. Every request completes, answered by
// the live member or failed with MEMBER_DEAD, well within the anycast
// timeout; the fragments of failed requests still on their way are
// dropped (AnycastStale), not relayed: no relay is left open.
func TestSimAnycastHeldMemberCrashes(t *testing.T) {
	seed := int64(74)
	f := newSimFabric(t, seed, impaired(0), fabric.Config{})
	srv := f.addMembers(2)
	clients := f.addMembers(4)
	f.slowLinks(srv, 1e8)
	for i, m := range srv {
		m.serve = func(r *endpoint.Request) ([]byte, error) { return anyEcho(i, r.Data[:8]), nil }
	}
	gid := f.anyRegister("crash", srv, ctrl.PolicyLeastOutstanding, nil)
	const total = 64
	r := rand.New(rand.NewPCG(uint64(seed), 0))
	mk := anyMiB(r)
	crashed := false
	answered, dead := 0, 0
	anyDrive(f, clients, gid, total, 8, func(i int) (uint64, []byte) {
		if i == total/4 && !crashed {
			crashed = true
			f.crash(srv[1])
		}
		return mk(i)
	}, func(i int, op *endpoint.Op) {
		switch {
		case op.Err == nil:
			if len(op.Resp) != 10 || !bytes.Equal(op.Resp[2:], op.Buf[:8]) {
				t.Errorf("seed %d: request %d: reply %x", seed, i, op.Resp)
			}
			answered++
		case errStatus(op.Err) == wire.StatusMemberDead:
			dead++
		default:
			t.Errorf("seed %d: request %d: %v", seed, i, op.Err)
		}
	})
	st := f.sw.Stats()
	t.Logf("virtual %v: %d answered, %d failed MEMBER_DEAD; switch held back %d fragments, dropped %d stale ones, %d expired, %d pending", f.net.Elapsed(), answered, dead, st.AnycastHeld, st.AnycastStale, st.AnycastExpired, st.AnycastPending)
	if st.AnycastHeld == 0 || st.AnycastExpired != 0 || st.AnycastPending != 0 {
		t.Errorf("seed %d: held %d, expired %d, pending %d: want some held, none expired or pending", seed, st.AnycastHeld, st.AnycastExpired, st.AnycastPending)
	}
	if dead > 0 && st.AnycastStale == 0 {
		t.Errorf("seed %d: %d requests failed mid-way and no fragment of theirs was dropped", seed, dead)
	}
	if answered < total/2 {
		t.Errorf("seed %d: only %d of %d requests answered by the live member", seed, answered, total)
	}
	if f.net.Elapsed() > 20*time.Second {
		t.Errorf("seed %d: %v of virtual time", seed, f.net.Elapsed())
	}
}
