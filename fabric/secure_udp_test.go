package fabric_test

import (
	"context"
	"crypto/rand"
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
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func secureIdentity(t *testing.T, a *secure.Authority, role secure.Role, name string) *secure.Identity {
	t.Helper()
	id, err := a.Issue(role, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestUDPSecureJob: a switch and the members of a job, each with its own
// identity of one fabric, join and run an Allreduce over loopback UDP
// with every datagram sealed; the switch knows each member's certified
// identity, and an endpoint without one cannot join.
func TestUDPSecureJob(t *testing.T) {
	a, err := secure.NewAuthority([]byte("fabric secret of the secure job test"))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("secret")
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token})
	if err != nil {
		t.Fatal(err)
	}
	sopts := secure.Options{}
	if _, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: secureIdentity(t, a, secure.RoleClient, "not-a-switch")}); err == nil {
		t.Fatal("a switch runs under a client's identity")
	}
	conn, err = netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: secureIdentity(t, a, secure.RoleSwitch, "sw0"), SecurityOptions: sopts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	const n = 3
	eps := make([]*endpoint.Endpoint, n)
	gs := make([]*endpoint.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{
			Security: secureIdentity(t, a, secure.RoleMember, fmt.Sprintf("sealed/%d", i)), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		eps[i] = ep
		wg.Go(func() {
			gs[i], errs[i] = ep.JoinJob(ctx, srv.Addr().String(), "sealed", n, i, endpoint.FabricOptions{Token: token})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d join: %v", i, err)
		}
	}
	const elems = 10000
	for i := range n {
		wg.Go(func() {
			send := make([]byte, 4*elems)
			for j := range elems {
				binary.LittleEndian.PutUint32(send[4*j:], math.Float32bits(float32(i+j%5)))
			}
			recv := make([]byte, 4*elems)
			if errs[i] = gs[i].Allreduce(ctx, send, recv, wire.DtypeF32, wire.AluAdd, endpoint.ReduceOptions{Deterministic: true}); errs[i] != nil {
				return
			}
			for j := range elems {
				if got, want := math.Float32frombits(binary.LittleEndian.Uint32(recv[4*j:])), float32(3*(j%5)+0+1+2); got != want {
					errs[i] = fmt.Errorf("element %d: %v, want %v", j, got, want)
					return
				}
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("member %d allreduce: %v", i, err)
		}
	}
	for i, ep := range eps {
		c, ok := srv.PeerIdentity(ep.LocalAddr())
		if !ok || c.Role != secure.RoleMember || c.Name != fmt.Sprintf("sealed/%d", i) {
			t.Fatalf("the switch sees member %d as %+v, %v", i, c, ok)
		}
		if c, ok := ep.PeerIdentity(srv.Addr()); !ok || c.Role != secure.RoleSwitch || c.Name != "sw0" {
			t.Fatalf("member %d sees the switch as %+v, %v", i, c, ok)
		}
	}
	if st := srv.SecurityStats(); st.Sealed == 0 || st.Opened == 0 || st.Handshakes != n || st.DroppedAuth+st.DroppedReplay != 0 {
		t.Fatalf("switch's security counters: %+v", st)
	}

	// Without an identity, no join: the switch drops what it sends, and
	// says that it takes sealed datagrams only, which the join's failure
	// at its deadline reports (the notice is not authenticated: it
	// explains, it does not fail anything).
	plain, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{}, endpoint.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close() })
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	defer pcancel()
	if _, err := plain.JoinJob(pctx, srv.Addr().String(), "other", 1, 0, endpoint.FabricOptions{Token: token}); !errors.Is(err, transport.ErrSealRequired) || !strings.Contains(err.Error(), "takes only sealed datagrams") {
		t.Fatalf("a join without an identity: %v; want no answer, explained by transport.ErrSealRequired", err)
	}
	if st := srv.SecurityStats(); st.DroppedPlain == 0 {
		t.Fatalf("switch's security counters after a plain JOIN: %+v", st)
	}
	if _, ok := srv.PeerIdentity(plain.LocalAddr()); ok {
		t.Fatal("the plain endpoint has an identity")
	}
}

// TestUDPSecureRoles: behind a switch that knows its peers' identities,
// each role may send only its own control requests: a client cannot join
// a job or lend memory as a memory node, a member cannot lend memory, a
// memory node cannot join; the refusals are counted. A memory node takes
// pool requests and grants only from a peer certified as a switch.
func TestUDPSecureRoles(t *testing.T) {
	a, srv, token, sopts := startSecureSwitch(t, "fabric secret of the secure roles test")
	addr := srv.Addr().String()
	opts := endpoint.FabricOptions{Token: token, Heartbeat: 50 * time.Millisecond}
	listen := func(role secure.Role, name string) *endpoint.Endpoint {
		ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: 2 * time.Second}, endpoint.Options{Security: secureIdentity(t, a, role, name), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	// lend offers memory from a memory node's engine holding a
	// credential of role and name.
	lend := func(role secure.Role, name string) error {
		st, err := memnode.NewStore(memnode.Config{})
		if err != nil {
			t.Fatal(err)
		}
		conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := node.New(conn, node.Config{Store: st, OpTimeout: 2 * time.Second}, node.Options{Security: secureIdentity(t, a, role, name), SecurityOptions: sopts})
		if err != nil {
			conn.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		_, err = n.Lend(ctx, srv.Addr(), 1, 1<<20, opts)
		return err
	}

	cli := listen(secure.RoleClient, "alice")
	if _, err := cli.JoinJob(ctx, addr, "job", 1, 0, opts); !errors.Is(err, wire.StatusAuth) {
		t.Errorf("a client joined a job: %v", err)
	}
	if err := lend(secure.RoleClient, "alice"); !errors.Is(err, wire.StatusAuth) {
		t.Errorf("a client lent memory: %v", err)
	}
	if _, err := cli.PoolStat(ctx, addr, opts); err != nil {
		t.Errorf("a client's pool stat: %v", err)
	}
	mem := listen(secure.RoleMemoryNode, "mem0")
	if _, err := mem.JoinJob(ctx, addr, "job", 1, 0, opts); !errors.Is(err, wire.StatusAuth) {
		t.Errorf("a memory node joined a job: %v", err)
	}
	member := listen(secure.RoleMember, "job/0")
	if err := lend(secure.RoleMember, "job/0"); !errors.Is(err, wire.StatusAuth) {
		t.Errorf("a member lent memory: %v", err)
	}
	if _, err := member.JoinJob(ctx, addr, "job", 1, 0, opts); err != nil {
		t.Errorf("a member's join: %v", err)
	}
	if n := srv.Stats().RoleRefused; n != 4 {
		t.Errorf("%d requests refused for their role, want 4", n)
	}
}

// TestUDPSecureRankBound: a member credential named JOB/RANK joins that
// job as that rank only, and the job's own groups (JOB.SUFFIX) as any
// rank, and the refusal of every other join says why.
func TestUDPSecureRankBound(t *testing.T) {
	a, srv, token, sopts := startSecureSwitch(t, "fabric secret of the rank binding test")
	ep, err := endpoint.Listen("127.0.0.1:0", endpoint.Config{OpTimeout: 2 * time.Second}, endpoint.Options{Security: secureIdentity(t, a, secure.RoleMember, "train/1"), SecurityOptions: sopts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	opts := endpoint.FabricOptions{Token: token}
	for _, c := range []struct {
		job  string
		rank int
	}{{"train", 0}, {"other", 1}, {"train", ctrl.RankAny}, {"trainer", 1}, {"train-2", 1}, {"other.train", 1}, {"other.x@trainer", 0}} {
		_, err := ep.JoinJob(ctx, srv.Addr().String(), c.job, 2, c.rank, opts)
		if !errors.Is(err, wire.StatusAuth) || !strings.Contains(err.Error(), "credential does not bind job") {
			t.Errorf("train/1 joining %s as rank %d: %v", c.job, c.rank, err)
		}
	}
	// A group of the job's own, as another rank than the credential's.
	g, err := ep.JoinJob(ctx, srv.Addr().String(), "train.0.1", 1, 0, opts)
	if err != nil {
		t.Fatalf("train/1 joining its job's group train.0.1 as rank 0: %v", err)
	}
	g.Leave(ctx)
	if n := srv.Stats().NameRefused; n != 7 {
		t.Errorf("%d joins refused for the credential's name, want 7", n)
	}
}

// TestRankMay: which credential names may join which job as which rank.
func TestRankMay(t *testing.T) {
	for _, c := range []struct {
		name, job string
		rank      int
		want      bool
	}{
		{"train/1", "train", 1, true},
		{"train/1", "train", 2, false},
		{"train/1", "train", ctrl.RankAny, false},
		{"train/01", "train", 1, false},      // outside the grammar
		{"train/1/x", "train", 1, false},     // outside the grammar
		{"train.v2/1", "train.v2", 1, false}, // outside the grammar
		{"train/1", "train.3.7", 0, true},
		{"train/1", "train.x", ctrl.RankAny, true},
		{"train/1", "train.", 1, true},
		{"train/1", "trainx", 1, false},
		{"train-42/0", "train-42-v2", 1, false},
		{"train/1", "x.train", 1, false},
		{"train/1", "x.y@train", 1, true},
		{"train/1", "x@train.y", 1, false},
		{"train/1", "train@", 1, true},
		{"h3", "h3", 5, true},
		{"h3", "h3.x", 0, true},
		{"h3", "train", 0, false},
		{"h3", "train.x", 0, false},
		{"stor/s0", "train.stor.w0@stor", 2, true},
		{"stor/s0", "train.stor.w0", 2, false},
		{"stor/s0", "stor", 2, true},
		{"evil/0", "train.stor.w0@stor", 2, false},
		{"a/b", "x", 0, false},
	} {
		if got := fabric.RankMay(c.name, c.job, c.rank); got != c.want {
			t.Errorf("RankMay(%q, %q, %d) = %v, want %v", c.name, c.job, c.rank, got, c.want)
		}
	}
}

// TestServiceMay: which credential names may serve which service.
func TestServiceMay(t *testing.T) {
	for _, c := range []struct {
		name, service string
		want          bool
	}{
		{"kv", "kv", true},
		{"kv/a", "kv", true},
		{"kv/3", "kv.shard1", true},
		{"kv/a", "kv.shard1@evil", true},
		{"evil/0", "kv", false},
		{"evil/0", "kv.evil", false},
		{"evil/0", "evil.kv", true},
		{"kv/a", "kv-2", false},
		{"kv/a", "kvx", false},
		{"kv/01", "kv", false}, // outside the grammar
		{"kv.x/a", "kv.x", false},
		{"stor/s0", "stor.s0-1-2", true},
		{"stor/g0", "stor.gw", true},
	} {
		if got := fabric.ServiceMay(c.name, c.service); got != c.want {
			t.Errorf("ServiceMay(%q, %q) = %v, want %v", c.name, c.service, got, c.want)
		}
	}
}

// startSecureSwitch starts a switch on loopback with a switch identity of
// a fabric whose authority comes from secret; it returns the authority,
// the server, the fabric token and the SA options.
func startSecureSwitch(t *testing.T, secret string) (*secure.Authority, *fabric.Server, []byte, secure.Options) {
	t.Helper()
	a, err := secure.NewAuthority([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	token := []byte("secret")
	sopts := secure.Options{}
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	sw, err := fabric.New(fabric.Config{Token: token, HeartbeatTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := fabric.NewServerWith(conn, sw, fabric.ServerOptions{Security: secureIdentity(t, a, secure.RoleSwitch, "sw0"), SecurityOptions: sopts})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return a, srv, token, sopts
}
