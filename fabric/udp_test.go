package fabric_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func startSwitch(t *testing.T, cfg fabric.Config) *fabric.Server {
	t.Helper()
	return startSwitchReaders(t, cfg, 1)
}

// startSwitchReaders starts a switch that reads from n sockets bound to
// one address (SO_REUSEPORT), each with its own reader.
func startSwitchReaders(t *testing.T, cfg fabric.Config, n int) *fabric.Server {
	t.Helper()
	ucfg := netio.UDPConfig{ReusePort: n > 1}
	conn, err := netio.ListenUDP("127.0.0.1:0", ucfg)
	if err != nil {
		t.Fatal(err)
	}
	var more []netio.Conn
	for range n - 1 {
		c, err := netio.ListenUDP(conn.LocalAddr().String(), ucfg)
		if err != nil {
			t.Fatal(err)
		}
		more = append(more, c)
	}
	sw, err := fabric.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Conns: more})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

func joinAll(t *testing.T, ctx context.Context, sw string, job string, n int, opts endpoint.FabricOptions) ([]*endpoint.Endpoint, []*endpoint.Group) {
	t.Helper()
	eps := make([]*endpoint.Endpoint, n)
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[i] = ep
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = ep.JoinJob(ctx, sw, job, n, i, opts)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d join: %v", i, err)
		}
	}
	return eps, gs
}

func f32s(v []float32) []byte {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return b
}

// TestUDPModes: multicast, allreduce and anycast end to end through a
// switch over loopback UDP.
func TestUDPModes(t *testing.T) {
	// With several sockets, members' packets reach the switch through
	// different readers, which step and write concurrently.
	for _, readers := range []int{1, 3} {
		t.Run(fmt.Sprintf("readers=%d", readers), func(t *testing.T) { testUDPModes(t, readers) })
	}
}

func testUDPModes(t *testing.T, readers int) {
	token := []byte("secret")
	srv := startSwitchReaders(t, fabric.Config{Token: token}, readers)
	sw := srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := endpoint.FabricOptions{Token: token}
	const n = 4
	_, gs := joinAll(t, ctx, sw, "job1", n, opts)

	// Multicast 1 MiB from member 0.
	data := make([]byte, 1<<20+5)
	for i := range data {
		data[i] = byte(i * 13)
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, len(data))
			if err := gs[i].Recv(ctx, 0, buf); err != nil {
				errs <- fmt.Errorf("member %d recv: %w", i, err)
				return
			}
			if !bytes.Equal(buf, data) {
				errs <- fmt.Errorf("member %d: data differs", i)
			}
		}()
	}
	if err := gs[0].Multicast(ctx, data, endpoint.MulticastOptions{}); err != nil {
		t.Fatalf("multicast: %v", err)
	}
	wg.Wait()

	// Allreduce f32 sum of 100k elements.
	const elems = 100000
	want := make([]float32, elems)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v := make([]float32, elems)
			for j := range v {
				v[j] = float32(i + j%7)
			}
			recv := make([]byte, 4*elems)
			if err := gs[i].Allreduce(ctx, f32s(v), recv, wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{Deterministic: true}); err != nil {
				errs <- fmt.Errorf("member %d allreduce: %w", i, err)
				return
			}
			for j := range elems {
				got := math.Float32frombits(binary.LittleEndian.Uint32(recv[4*j:]))
				exp := float32(0)
				for k := range n {
					exp += float32(k + j%7)
				}
				if got != exp {
					errs <- fmt.Errorf("member %d element %d: %v want %v", i, j, got, exp)
					return
				}
			}
		}()
	}
	_ = want
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}

	// Anycast: two servers, round robin.
	var served [2]int
	var mu sync.Mutex
	for i := range 2 {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		_, err = ep.RegisterService(ctx, sw, endpoint.ServiceConfig{Name: "kv", Size: 2, Policy: ctrl.PolicyRoundRobin}, i,
			func(key uint64, _ endpoint.Caller, req []byte) ([]byte, error) {
				mu.Lock()
				served[i]++
				mu.Unlock()
				return append([]byte(fmt.Sprintf("m%d:", i)), req...), nil
			}, opts)
		if err != nil {
			t.Fatalf("register %d: %v", i, err)
		}
	}
	cli, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	for i := range 20 {
		rep, err := cli.Anycast(ctx, sw, "kv", uint64(i), []byte("hello"), opts)
		if err != nil {
			t.Fatalf("anycast %d: %v", i, err)
		}
		if !bytes.HasSuffix(rep, []byte(":hello")) {
			t.Fatalf("reply %q", rep)
		}
	}
	// The asynchronous form: 10 requests in flight at once.
	notify := make(chan *endpoint.Op, 10)
	for i := range 10 {
		if _, err := cli.StartAnycast(ctx, sw, "kv", uint64(i), []byte{byte(i)}, opts, notify); err != nil {
			t.Fatal(err)
		}
	}
	for range 10 {
		op := <-notify
		if op.Err != nil || len(op.Resp) != 4 || op.Resp[3] != byte(op.Addr) {
			t.Fatalf("async anycast: %v %q", op.Err, op.Resp)
		}
	}
	mu.Lock()
	got := served
	mu.Unlock()
	if got[0] != 15 || got[1] != 15 {
		t.Fatalf("round robin served %v", got)
	}
	t.Logf("switch stats: %+v", srv.Stats())
}

// TestUDPJoinMTU: a switch refuses a member whose MTU is above its own
// (it could not send the member's aggregation results back: before this
// check such a job hung in its first multi-packet Allreduce) and a job
// member whose MTU differs from the others'; both errors say what to set.
// A member below the switch's MTU joins.
func TestUDPJoinMTU(t *testing.T) {
	token := []byte("secret")
	srv := startSwitch(t, fabric.Config{Token: token, Transport: transport.Config{MTU: 8972}})
	sw := srv.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	opts := endpoint.FabricOptions{Token: token}
	listen := func(mtu int) *endpoint.Endpoint {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{Transport: transport.Config{MTU: mtu}}, endpoint.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}

	big := listen(9000)
	_, err := big.JoinJob(ctx, sw, "big", 1, 0, opts)
	t.Log(err)
	if !errors.Is(err, wire.StatusTooLarge) || !strings.Contains(err.Error(), "at most 8972") {
		t.Fatalf("join with MTU 9000 at a switch of 8972: %v, want StatusTooLarge naming 8972", err)
	}
	if _, err := big.RegisterService(ctx, sw, endpoint.ServiceConfig{Name: "svc", Size: 1}, 0, nil, opts); !errors.Is(err, wire.StatusTooLarge) {
		t.Fatalf("register with MTU 9000: %v, want StatusTooLarge", err)
	}

	// Two members of one job: the first joins with 8972 and waits for the
	// second; one with 1500 is refused, naming the job's MTU, and the
	// first is told at once that a rank asked with another MTU (the
	// launch is broken: the rendezvous is dropped); launched again with
	// 8972 both, the job forms.
	first := listen(8972)
	before := srv.Stats().ControlIn
	joined := make(chan error, 1)
	go func() {
		_, err := first.JoinJob(ctx, sw, "pair", 2, 0, opts)
		joined <- err
	}()
	for srv.Stats().ControlIn == before { // until the first join reached the switch
		if ctx.Err() != nil {
			t.Fatal("first join never reached the switch")
		}
		time.Sleep(time.Millisecond)
	}
	_, serr := listen(1500).JoinJob(ctx, sw, "pair", 2, 1, opts)
	t.Log(serr)
	if !errors.Is(serr, wire.StatusBadOperand) || !strings.Contains(serr.Error(), "MTU 8972") {
		t.Fatalf("join with MTU 1500 into a job of 8972: %v, want StatusBadOperand naming MTU 8972", serr)
	}
	if err := <-joined; !errors.Is(err, wire.StatusBusy) || !strings.Contains(err.Error(), "rank 1 asked for the job with size 2 and MTU 1500") {
		t.Fatalf("the waiting member: %v, want it told of rank 1's MTU at once", err)
	}
	go func() {
		_, err := first.JoinJob(ctx, sw, "pair", 2, 0, opts)
		joined <- err
	}()
	if _, err := listen(8972).JoinJob(ctx, sw, "pair", 2, 1, opts); err != nil {
		t.Fatalf("second member with the job's MTU: %v", err)
	}
	if err := <-joined; err != nil {
		t.Fatalf("first member: %v", err)
	}
	if st := srv.Stats(); st.ControlRefused < 3 {
		t.Fatalf("ControlRefused %d, want at least 3", st.ControlRefused)
	}
}

// TestUDPEagerMulticast: a small eager multicast returns with the
// caller's buffer free at once (the transport sends its own copy), every
// member receives it, and a sender that closes right after its last one
// still delivers it (Close lingers until the switch acknowledges it), as
// does one that leaves the group right after.
func TestUDPEagerMulticast(t *testing.T) {
	srv := startSwitch(t, fabric.Config{Insecure: true})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 3
	eps, gs := joinAll(t, ctx, srv.Addr().String(), "eager", n, endpoint.FabricOptions{Insecure: true})
	recvAll := func(want []byte) {
		t.Helper()
		for i := 1; i < n; i++ {
			buf := make([]byte, len(want))
			if err := gs[i].Recv(ctx, 0, buf); err != nil || !bytes.Equal(buf, want) {
				t.Fatalf("member %d got %q, %v; want %q", i, buf, err, want)
			}
		}
	}
	for k := range 20 {
		data := fmt.Appendf(nil, "small and eager %d", k)
		want := bytes.Clone(data)
		if err := gs[0].Multicast(ctx, data, endpoint.MulticastOptions{Eager: true}); err != nil {
			t.Fatal(err)
		}
		clear(data) // the caller's buffer is free once Multicast returns
		recvAll(want)
	}
	// One that leaves the group right after its multicast: Leave waits
	// for it to be delivered before the switch forgets the member.
	if err := gs[1].Multicast(ctx, []byte("leaving"), endpoint.MulticastOptions{Eager: true}); err != nil {
		t.Fatal(err)
	}
	if err := gs[1].Leave(ctx); err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{0, 2} {
		buf := make([]byte, len("leaving"))
		if err := gs[i].Recv(ctx, 1, buf); err != nil || string(buf) != "leaving" {
			t.Fatalf("member %d got %q, %v", i, buf, err)
		}
	}
	if st := srv.Stats(); st.MembersLeft != 1 || st.MembersDead != 0 {
		t.Fatalf("after a member left: %d left, %d dead; want 1 and 0", st.MembersLeft, st.MembersDead)
	}
	if err := gs[0].Multicast(ctx, []byte("last words"), endpoint.MulticastOptions{Eager: true}); err != nil {
		t.Fatal(err)
	}
	if err := eps[0].Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len("last words"))
	if err := gs[2].Recv(ctx, 0, buf); err != nil || string(buf) != "last words" {
		t.Fatalf("member 2 got %q, %v", buf, err)
	}
}
