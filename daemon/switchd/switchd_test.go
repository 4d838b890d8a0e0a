package switchd

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testToken is the fabric token of the tests' switches.
var testToken = []byte("switchd test token")

// faults is the fault injection the end-to-end tests run under.
var faults = fabric.FaultConfig{Drop: 0.02, Dup: 0.02, Reorder: 0.02, Corrupt: 0.01, Seed: 42}

// start runs a switch on a free loopback port for the test's duration.
func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	if cfg.Listen == "" {
		cfg.Listen = "127.0.0.1:0"
	}
	srv, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Error(err)
		}
	})
	return srv
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// listen opens an endpoint on a free loopback port for the test's
// duration.
func listen(t *testing.T) *endpoint.Endpoint {
	t.Helper()
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep
}

// joinAll makes n endpoints join job at srv and returns their groups, by
// rank.
func joinAll(t *testing.T, ctx context.Context, srv *Server, job string, n int) []*endpoint.Group {
	t.Helper()
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ep := listen(t)
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(ctx, srv.Addr().String(), job, n, i, endpoint.FabricOptions{Token: testToken})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d join: %v", i, err)
		}
		if gs[i].Rank() != i || gs[i].Size() != n {
			t.Fatalf("member %d: rank %d of %d", i, gs[i].Rank(), gs[i].Size())
		}
	}
	return gs
}

// TestModesWithFaults runs every mode end to end through a switch that
// drops, duplicates, reorders and corrupts what it sends: a job of 4
// members multicasts 256 KiB, allreduces i32 vectors (the sums must be
// exact), and a client sends 50 anycast requests to a 2-member service.
// The switch reads from two sockets: the members' packets are stepped by
// two readers, one while the other writes.
func TestModesWithFaults(t *testing.T) {
	srv := start(t, Config{Token: testToken, Fault: faults, Readers: 2})
	ctx := testCtx(t)
	const n = 4
	gs := joinAll(t, ctx, srv, "job", n)

	t.Run("multicast", func(t *testing.T) {
		data := make([]byte, 256<<10+3)
		for i := range data {
			data[i] = byte(i*7 + i>>8)
		}
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			wg.Go(func() {
				buf := make([]byte, len(data))
				if err := gs[i].Recv(ctx, 0, buf); err != nil {
					t.Errorf("member %d recv: %v", i, err)
					return
				}
				if !bytes.Equal(buf, data) {
					t.Errorf("member %d: received data differs", i)
				}
			})
		}
		if err := gs[0].Multicast(ctx, data, endpoint.MulticastOptions{}); err != nil {
			t.Errorf("multicast: %v", err)
		}
		wg.Wait()
	})

	t.Run("allreduce", func(t *testing.T) {
		const elems = 20000
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				send := make([]byte, 4*elems)
				for j := range elems {
					binary.LittleEndian.PutUint32(send[4*j:], uint32(int32(i*1000-j)))
				}
				recv := make([]byte, 4*elems)
				if err := gs[i].Allreduce(ctx, send, recv, wire.DtypeI32, wire.AluAdd, endpoint.ReduceOptions{}); err != nil {
					t.Errorf("member %d allreduce: %v", i, err)
					return
				}
				for j := range elems {
					want := int32(0)
					for k := range n {
						want += int32(k*1000 - j)
					}
					if got := int32(binary.LittleEndian.Uint32(recv[4*j:])); got != want {
						t.Errorf("member %d element %d: %d, want %d", i, j, got, want)
						return
					}
				}
			})
		}
		wg.Wait()
	})

	t.Run("anycast", func(t *testing.T) {
		var mu sync.Mutex
		var served [2]int
		for i := range 2 {
			ep := listen(t)
			_, err := ep.RegisterService(ctx, srv.Addr().String(),
				endpoint.ServiceConfig{Name: "echo", Size: 2, Policy: ctrl.PolicyRoundRobin}, i,
				func(key uint64, _ endpoint.Caller, req []byte) ([]byte, error) {
					mu.Lock()
					served[i]++
					mu.Unlock()
					return fmt.Appendf(nil, "m%d:%d:%s", i, key, req), nil
				}, endpoint.FabricOptions{Token: testToken})
			if err != nil {
				t.Fatalf("register %d: %v", i, err)
			}
		}
		cli := listen(t)
		const requests = 50
		for i := range requests {
			req := fmt.Appendf(nil, "request %d", i)
			rep, err := cli.Anycast(ctx, srv.Addr().String(), "echo", uint64(i), req, endpoint.FabricOptions{Token: testToken})
			if err != nil {
				t.Fatalf("anycast %d: %v", i, err)
			}
			if !bytes.HasSuffix(rep, fmt.Appendf(nil, ":%d:%s", i, req)) || (rep[1] != '0' && rep[1] != '1') {
				t.Fatalf("anycast %d: reply %q", i, rep)
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if served[0]+served[1] != requests || served[0] == 0 || served[1] == 0 {
			t.Errorf("served %v, want %d requests spread over both servers", served, requests)
		}
	})

	st := srv.Stats().Switch
	t.Logf("switch stats: %+v", st)
	if st.FaultDrops == 0 || st.FaultDups == 0 || st.FaultReorders == 0 || st.FaultCorrupts == 0 {
		t.Errorf("not every fault was injected: drops %d dups %d reorders %d corrupts %d",
			st.FaultDrops, st.FaultDups, st.FaultReorders, st.FaultCorrupts)
	}
	if st.MulticastOut == 0 || st.AggregateOut == 0 || st.AnycastOut == 0 {
		t.Errorf("a mode sent nothing: multicast %d aggregate %d anycast %d", st.MulticastOut, st.AggregateOut, st.AnycastOut)
	}
	groups := srv.Groups()
	if len(groups) != 2 || groups[0].Name != "job" || groups[1].Name != "echo" || !groups[1].Service {
		t.Errorf("Groups() = %+v", groups)
	}
}

// TestBadToken checks that a join under the wrong token is refused with
// wire.StatusAuth, saying the token is not the switch's, and counted.
func TestBadToken(t *testing.T) {
	var logs logBuffer
	srv := start(t, Config{Token: testToken, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ctx := testCtx(t)
	ep := listen(t)
	_, err := ep.JoinJob(ctx, srv.Addr().String(), "job", 1, 0, endpoint.FabricOptions{Token: []byte("wrong")})
	if !errors.Is(err, wire.StatusAuth) || !strings.Contains(err.Error(), "this process's token") || !strings.Contains(err.Error(), "is not the switch's") {
		t.Fatalf("join with a wrong token: %v, want %v saying the token is not the switch's", err, wire.StatusAuth)
	}
	st := srv.Stats().Switch
	if st.AuthFailures == 0 || st.ControlRefused == 0 {
		t.Errorf("auth failures %d, control refusals %d: want both counted", st.AuthFailures, st.ControlRefused)
	}
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "level=WARN msg=\"switch: control request refused: it does not carry this switch's fabric token\" addr="+ep.LocalAddr().String()); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no warning naming the sender in the log:\n%s", logs.String())
		}
	}
	if st.Groups != 0 {
		t.Errorf("%d groups after a refused join", st.Groups)
	}
	// The right token still works.
	g, err := ep.JoinJob(ctx, srv.Addr().String(), "job", 1, 0, endpoint.FabricOptions{Token: testToken})
	if err != nil {
		t.Fatalf("join with the right token: %v", err)
	}
	if g.Size() != 1 {
		t.Errorf("group of %d", g.Size())
	}
}
