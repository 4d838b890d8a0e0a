package fabric_test

import (
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// TestSimAnycastExpiry: a service member that never replies does not hold
// the switch's forwarding state for ever. Its request fails to the client
// (StatusBusy) after AnycastTimeout, the member's outstanding count is
// given back — so once it answers again, least-outstanding selection sends
// it its share instead of starving it — and a client cannot have more than
// MaxAnycastPerClient requests in flight.
func TestSimAnycastExpiry(t *testing.T) {
	const timeout = 2 * time.Second
	f := newSimFabric(t, 1, impaired(0), fabric.Config{AnycastTimeout: timeout, MaxAnycastPerClient: 2})
	ms := f.addMembers(3)
	servers, client := ms[:2], ms[2]
	gid := f.anyRegister("svc", servers, ctrl.PolicyLeastOutstanding, nil)
	echo := func(rank int) func(r *endpoint.Request) ([]byte, error) {
		return func(r *endpoint.Request) ([]byte, error) { return anyEcho(rank, r.Data), nil }
	}
	servers[1].serve = echo(1) // member 0 hangs: never replies

	var done []*endpoint.Op
	send := func(n int) {
		for i := range n {
			op := &endpoint.Op{Kind: endpoint.KindAnycast, Peer: f.swAddr, Group: gid, Buf: []byte{byte(i)}, Timeout: time.Hour}
			client.post(op, func(op *endpoint.Op) { done = append(done, op) })
		}
	}
	// Two requests at once: one to each member.
	t0 := f.net.Now()
	send(2)
	f.run(func() bool { return len(done) == 2 }, 2*timeout, "requests to a hung member")
	var failed *endpoint.Op
	for _, op := range done {
		if op.Err != nil {
			failed = op
		}
	}
	if failed == nil || !errors.Is(failed.Err, wire.StatusBusy) {
		t.Fatalf("request to the hung member: err %v, want StatusBusy", failed)
	}
	if el := f.net.Now().Sub(t0); el < timeout {
		t.Fatalf("request failed after %v, before AnycastTimeout %v", el, timeout)
	}
	if st := f.sw.Stats(); st.AnycastExpired != 1 || st.AnycastPending != 0 {
		t.Fatalf("AnycastExpired %d, AnycastPending %d; want 1 and 0", st.AnycastExpired, st.AnycastPending)
	}

	// Member 0 answers again: sequential requests alternate between the
	// two (both have nothing outstanding).
	servers[0].serve = echo(0)
	per := [2]int{}
	for range 6 {
		done = done[:0]
		send(1)
		f.run(func() bool { return len(done) == 1 }, time.Second, "request")
		if done[0].Err != nil {
			t.Fatalf("request: %v", done[0].Err)
		}
		per[binary.BigEndian.Uint16(done[0].Resp)]++
	}
	if per[0] != 3 || per[1] != 3 {
		t.Fatalf("requests per member %v, want 3 each (member 0 must not stay charged with the expired request)", per)
	}

	// Both hang: a third request in flight from the client is refused.
	servers[0].serve, servers[1].serve = nil, nil
	done = done[:0]
	send(3)
	f.run(func() bool { return len(done) >= 1 }, time.Second, "refusal")
	if len(done) != 1 || !errors.Is(done[0].Err, wire.StatusBusy) {
		t.Fatalf("third request in flight: %d done, err %v; want refused with StatusBusy", len(done), done[0].Err)
	}
	if st := f.sw.Stats(); st.AnycastRefused != 1 || st.AnycastPending != 2 {
		t.Fatalf("AnycastRefused %d, AnycastPending %d; want 1 and 2", st.AnycastRefused, st.AnycastPending)
	}
	f.run(func() bool { return len(done) == 3 }, 2*timeout, "expiry")
	if st := f.sw.Stats(); st.AnycastExpired != 3 || st.AnycastPending != 0 {
		t.Fatalf("AnycastExpired %d, AnycastPending %d; want 3 and 0", st.AnycastExpired, st.AnycastPending)
	}
}
