package fabric_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/hostile"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
)

// capConn keeps a copy of every datagram written through it.
type capConn struct {
	netio.Conn
	mu      sync.Mutex
	written [][]byte
}

func (c *capConn) WriteBatch(ds []netio.Datagram) error {
	c.mu.Lock()
	for _, d := range ds {
		c.written = append(c.written, bytes.Clone(d.Buf))
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(ds)
}

func (c *capConn) captured() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.written...)
}

// TestUDPSecureReplayAndInjection: against a sealed switch, what a
// sniffer without a credential can do fails: every datagram a member
// sent (its JOIN, its contributions) replayed from the member's own
// address and from new ports, and 20,000 crafted plain datagrams
// (multicast and aggregation injections, forged headers of every kind)
// leave the job's Allreduce results exact and create no group.
func TestUDPSecureReplayAndInjection(t *testing.T) {
	a, srv, token, sopts := startSecureSwitch(t, "fabric secret of the replay test")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	const n = 3
	eps := make([]*endpoint.Endpoint, n)
	caps := make([]*capConn, n)
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		caps[i] = &capConn{Conn: conn}
		ep, err := endpoint.New(caps[i], endpoint.Config{}, endpoint.Options{
			Security: secureIdentity(t, a, secure.RoleMember, fmt.Sprintf("replay/%d", i)), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[i] = ep
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(ctx, srv.Addr().String(), "replay", n, i, endpoint.FabricOptions{Token: token, Heartbeat: 50 * time.Millisecond})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d join: %v", i, err)
		}
	}
	const elems = 4096
	allreduce := func(round int) {
		for i := range n {
			wg.Go(func() {
				send := make([]byte, 4*elems)
				for j := range elems {
					binary.LittleEndian.PutUint32(send[4*j:], math.Float32bits(float32(i+j%7+round)))
				}
				recv := make([]byte, 4*elems)
				if errs[i] = gs[i].Allreduce(ctx, send, recv, wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{Deterministic: true}); errs[i] != nil {
					return
				}
				for j := range elems {
					if got, want := math.Float32frombits(binary.LittleEndian.Uint32(recv[4*j:])), float32(n*(j%7+round)+0+1+2); got != want {
						errs[i] = fmt.Errorf("round %d, element %d: %v, want %v", round, j, got, want)
						return
					}
				}
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("round %d, member %d: %v (switch %+v)", round, i, err, srv.SecurityStats())
			}
		}
	}
	allreduce(0)
	groups := len(srv.Groups())
	captured := caps[0].captured()
	to := srv.Addr()
	send := func(c netio.Conn, b []byte) {
		if err := c.WriteBatch([]netio.Datagram{{Addr: to, Buf: bytes.Clone(b)}}); err != nil {
			t.Fatal(err)
		}
	}
	before := srv.SecurityStats()
	// From the member's own address (its writer holds the lock), then
	// from new ports, while the job runs again.
	eps[0].Locked(func() {
		for _, b := range captured {
			send(caps[0].Conn, b)
		}
	})
	attacker, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer attacker.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		g := hostile.New(hostile.Config{Seed: 7})
		for i := range 20000 {
			if i%4 == 0 && len(captured) > 0 {
				send(attacker, captured[i/4%len(captured)])
			}
			send(attacker, g.Next())
			if i%50 == 0 {
				time.Sleep(time.Millisecond)
			}
		}
	}()
	for round := 1; round <= 5; round++ {
		allreduce(round)
	}
	<-done
	allreduce(6)
	if got := len(srv.Groups()); got != groups {
		t.Fatalf("%d groups after the attack, %d before", got, groups)
	}
	st := srv.SecurityStats()
	if st.DroppedPlain == before.DroppedPlain || st.DroppedNoSA+st.DroppedReplay == before.DroppedNoSA+before.DroppedReplay {
		t.Fatalf("the attack was not dropped and counted: before %+v, after %+v", before, st)
	}
}
