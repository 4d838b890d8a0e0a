package fabric_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
)

// TestSimMulticastContinue: a multicast posted with Continue completes
// successfully although a receiver crashed half-way: once the switch
// declares it dead (heartbeat timeout) it drops it from the ACK merge. The
// live members all have the data, and the group keeps working. Lossless,
// and with loss, reordering, duplication and corruption on every link.
func TestSimMulticastContinue(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) { contRun(t, int64(81+loss*100), loss) })
	}
}

func contRun(t *testing.T, seed int64, loss float64) {
	const hbTimeout = time.Second
	f := newSimFabric(t, seed, impaired(loss), fabric.Config{HeartbeatTimeout: hbTimeout})
	ms := f.addMembers(5)
	gid := f.join("cont", ms)
	r := rand.New(rand.NewPCG(uint64(seed), 3))

	// 1 MB takes about 8 ms at 1 Gbit/s; member 3 crashes after 2 ms.
	data := randBytes(r, 1<<20)
	bufs := make([][]byte, len(ms))
	recvErr := make([]error, len(ms))
	received := 0
	for i := 1; i < len(ms); i++ {
		bufs[i] = make([]byte, len(data))
		ms[i].post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gid, From: 0, Buf: bufs[i]}, func(op *endpoint.Op) {
			recvErr[i] = op.Err
			received++
		})
	}
	var mcErr error
	var mcAt time.Duration
	mcDone := false
	ms[0].post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gid, Buf: data, Continue: true}, func(op *endpoint.Op) {
		mcErr, mcDone, mcAt = op.Err, true, f.net.Elapsed()
	})
	f.net.RunFor(2 * time.Millisecond)
	if mcDone || received > 0 {
		t.Fatalf("seed %d: the multicast finished before the crash; make it larger", seed)
	}
	crashAt := f.net.Elapsed()
	f.crash(ms[3])
	f.run(func() bool { return mcDone && received == len(ms)-2 }, 10*time.Second, "multicast with Continue and a crashed member")
	if mcErr != nil {
		t.Fatalf("seed %d: multicast with Continue failed: %v; switch %+v", seed, mcErr, f.sw.Stats())
	}
	took := mcAt - crashAt
	t.Logf("multicast with Continue completed %v after the crash (heartbeat timeout %v)", took, hbTimeout)
	if took > hbTimeout+hbTimeout/2 {
		t.Fatalf("seed %d: multicast completed %v after the crash; heartbeat timeout %v", seed, took, hbTimeout)
	}
	for i := 1; i < len(ms); i++ {
		if i == 3 {
			continue
		}
		if recvErr[i] != nil {
			t.Fatalf("seed %d: member %d recv: %v", seed, i, recvErr[i])
		}
		if !bytes.Equal(bufs[i], data) {
			t.Fatalf("seed %d: member %d received different bytes", seed, i)
		}
	}
	// The switch's notice to the sender is a datagram of its own: with
	// loss it may be resent and arrive after the merged ACK that
	// completed the multicast, but it arrives.
	f.run(func() bool { return ms[0].core.DeadMember(gid, 3) != nil }, hbTimeout/2, "the sender told that member 3 died")

	// The group goes on without member 3: a plain multicast (no Continue)
	// from another member reaches the live ones. A plain multicast in
	// flight when its sender learns of a crash fails (the data may not
	// have reached the dead member), so the live members first hear of
	// it: the switch's notice to each can take retransmissions.
	live := []*simMember{ms[0], ms[1], ms[2], ms[4]}
	f.run(func() bool {
		for _, m := range live {
			if m.core.DeadMember(gid, 3) == nil {
				return false
			}
		}
		return true
	}, 10*time.Second, "the live members told that member 3 died")
	contMulticastAmong(f, gid, live, 4, randBytes(r, 100000))
}

// contMulticastAmong is multicastRound for a subset of a group's members:
// the one with member id sender multicasts data, the others receive it.
func contMulticastAmong(f *simFabric, gid uint32, ms []*simMember, sender uint16, data []byte) {
	f.t.Helper()
	pending := 0
	for _, m := range ms {
		if m.member[gid] == sender {
			pending++
			m.post(&endpoint.Op{Kind: endpoint.KindMulticast, Peer: f.swAddr, Group: gid, Buf: data}, func(op *endpoint.Op) {
				if op.Err != nil {
					f.t.Fatalf("seed %d: multicast from member %d: %v", f.seed, sender, op.Err)
				}
				pending--
			})
			continue
		}
		buf := make([]byte, len(data))
		pending++
		m.post(&endpoint.Op{Kind: endpoint.KindRecv, Peer: f.swAddr, Group: gid, From: sender, Buf: buf}, func(op *endpoint.Op) {
			if op.Err != nil || !bytes.Equal(buf, data) {
				f.t.Fatalf("seed %d: member %d recv from %d: %v", f.seed, m.member[gid], sender, op.Err)
			}
			pending--
		})
	}
	f.run(func() bool { return pending == 0 }, time.Minute, "multicast among the live members")
}
