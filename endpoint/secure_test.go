package endpoint

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// tapConn is a netio.Conn that keeps a copy of every datagram written.
type tapConn struct {
	netio.Conn
	mu      sync.Mutex
	written [][]byte
}

func (c *tapConn) WriteBatch(ds []netio.Datagram) error {
	c.mu.Lock()
	for _, d := range ds {
		c.written = append(c.written, bytes.Clone(d.Buf))
	}
	c.mu.Unlock()
	return c.Conn.WriteBatch(ds)
}

// wire returns the datagrams written so far.
func (c *tapConn) wire() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.written
}

func testAuthority(t testing.TB) *secure.Authority {
	t.Helper()
	a, err := secure.NewAuthority([]byte("endpoint test fabric secret"))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func testIdentity(t testing.TB, a *secure.Authority, role secure.Role, name string) *secure.Identity {
	t.Helper()
	id, err := a.Issue(role, name, rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// listenTapped opens an endpoint on loopback whose written datagrams are
// kept; id nil runs it without a security layer.
func listenTapped(t testing.TB, cfg Config, id *secure.Identity) (*Endpoint, *tapConn) {
	t.Helper()
	conn, err := netio.ListenUDP("127.0.0.1:0", netio.UDPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	tap := &tapConn{Conn: conn}
	ep, err := New(tap, cfg, Options{Security: id, SecurityOptions: secure.Options{}})
	if err != nil {
		conn.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep, tap
}

// TestSecureOneSided: two endpoints with identities of one fabric WRITE,
// READ and FETCHADD over loopback UDP; every datagram either writes is
// sealed (or a handshake message), the payload never crosses in clear,
// and each side knows the other's certified identity. The endpoints'
// security options are the zero value: sealing encrypts by default.
func TestSecureOneSided(t *testing.T) {
	a := testAuthority(t)
	srv, srvTap := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleMemoryNode, "mem0"))
	cli, cliTap := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleClient, "alice"))
	mem := make([]byte, 1<<20)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	r, err := cli.Dial(ctx, srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	secret := []byte("PLAINTEXT-REGION-BYTES:")
	data := bytes.Repeat(secret, 300000/len(secret))
	if err := r.Write(ctx, key, 4096, data); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	if err := r.Read(ctx, key, 4096, got); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if old, err := r.FetchAdd(ctx, key, 8, 5); err != nil || old != 0 {
		t.Fatalf("fetch-add: %d, %v", old, err)
	}
	var mine []byte
	srv.Locked(func() { mine = bytes.Clone(mem[4096 : 4096+len(data)]) })
	if !bytes.Equal(mine, data) {
		t.Fatal("the region does not hold the bytes written")
	}
	for _, tap := range []*tapConn{srvTap, cliTap} {
		w := tap.wire()
		if len(w) == 0 {
			t.Fatal("nothing written")
		}
		keyBytes := binary.BigEndian.AppendUint64(nil, key)
		for _, d := range w {
			if bytes.Contains(d, secret[:12]) {
				t.Fatal("region bytes crossed the wire in clear")
			}
			if bytes.Contains(d, keyBytes) {
				t.Fatal("the region key crossed the wire in clear")
			}
		}
	}
	for _, ep := range []*Endpoint{srv, cli} {
		if st := ep.SecurityStats(); st.Sealed == 0 || st.Opened == 0 || st.Handshakes != 1 || st.DroppedAuth+st.DroppedReplay+st.DroppedPlain != 0 {
			t.Fatalf("security counters %+v", st)
		}
	}
	if c, ok := srv.PeerIdentity(cli.LocalAddr()); !ok || c.Role != secure.RoleClient || c.Name != "alice" {
		t.Fatalf("the server sees the client as %+v, %v", c, ok)
	}
	if c, ok := cli.PeerIdentity(srv.LocalAddr()); !ok || c.Role != secure.RoleMemoryNode || c.Name != "mem0" {
		t.Fatalf("the client sees the server as %+v, %v", c, ok)
	}
	if srv.MTU() != transport.DefaultMTU-16 {
		t.Fatalf("transport MTU %d with the tag's room taken from %d", srv.MTU(), transport.DefaultMTU)
	}
}

// TestSecureRefusesStrangers: an endpoint without an identity, or with
// one of another fabric, gets nothing from a secured endpoint: the plain
// one is told that only sealed datagrams are taken, which its WRITE's
// timeout reports (transport.ErrSealRequired: the notice is not
// authenticated, so it explains the failure and does not cause it), the
// foreign one's requests time out, and the secured side counts what it
// dropped.
func TestSecureRefusesStrangers(t *testing.T) {
	srv, _ := listenTapped(t, Config{}, testIdentity(t, testAuthority(t), secure.RoleMemoryNode, "mem0"))
	mem := make([]byte, 4096)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	other, err := secure.NewAuthority([]byte("another fabric's secret"))
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := listenTapped(t, Config{}, nil)
	foreign, _ := listenTapped(t, Config{}, testIdentity(t, other, secure.RoleClient, "mallory"))
	for i, ep := range []*Endpoint{plain, foreign} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		err := ep.Remote(srv.LocalAddr()).Write(ctx, key, 0, []byte("overwrite"))
		cancel()
		if err == nil {
			t.Fatal("a WRITE from a stranger succeeded")
		}
		if i == 0 && !errors.Is(err, transport.ErrSealRequired) {
			t.Fatalf("plain endpoint's WRITE: %v; want a timeout explained by transport.ErrSealRequired", err)
		}
		if i == 1 && errors.Is(err, transport.ErrSealRequired) {
			t.Fatalf("foreign endpoint's WRITE: %v; it was never told seal-required", err)
		}
		if _, ok := srv.PeerIdentity(ep.LocalAddr()); ok {
			t.Fatal("the stranger has an identity")
		}
	}
	// The plain endpoint's requests are dropped; the foreign one never
	// gets past the handshake (the server's certificate does not verify
	// under its authority, so it sends no FINISH).
	if st := srv.SecurityStats(); st.DroppedPlain == 0 || st.SealRequiredSent == 0 || st.Opened != 0 || st.Handshakes != 0 || st.Peers != 0 {
		t.Fatalf("secured side: %+v", st)
	}
	if st := foreign.SecurityStats(); st.HandshakesFailed == 0 || st.Handshakes != 0 {
		t.Fatalf("foreign side: %+v", st)
	}
	srv.Locked(func() {
		if bytes.Contains(mem, []byte("overwrite")) {
			t.Fatal("a stranger wrote the region")
		}
	})
}

// TestSecureCloseStopsAll: closing secured endpoints in the middle of a
// session leaves no goroutine behind, and later operations fail with
// ErrClosed.
func TestSecureCloseStopsAll(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	a := testAuthority(t)
	srv, _ := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleMemoryNode, "mem0"))
	cli, _ := listenTapped(t, Config{}, testIdentity(t, a, secure.RoleClient, "c"))
	key, err := srv.Register(make([]byte, 1<<16), wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	r := cli.Remote(srv.LocalAddr())
	if err := r.Write(ctx, key, 0, make([]byte, 1<<15)); err != nil {
		t.Fatal(err)
	}
	// A handshake in progress with an address nobody answers at.
	op := &Op{Kind: KindNop, Peer: netip.MustParseAddrPort("127.0.0.1:9")}
	if err := cli.Start(op, nil); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	cli.Close()
	<-op.Done()
	if !errors.Is(op.Err, ErrClosed) {
		t.Fatalf("op in flight at Close: %v", op.Err)
	}
	if err := r.Write(ctx, key, 0, []byte{1}); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after Close: %v", err)
	}
}

// TestNoAnswerUnsealedHint: an endpoint that seals nothing and gets no
// answer from the switch says that a sealing switch drops such requests;
// a sealed one does not.
func TestNoAnswerUnsealedHint(t *testing.T) {
	a := testAuthority(t)
	for _, id := range []*secure.Identity{nil, testIdentity(t, a, secure.RoleClient, "c")} {
		ep, _ := listenTapped(t, Config{}, id)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		_, err := ep.PoolStat(ctx, "127.0.0.1:1", FabricOptions{Token: []byte("t")})
		cancel()
		var na *NoAnswerError
		if !errors.As(err, &na) {
			t.Fatalf("sealed %v: %v, want a NoAnswerError", id != nil, err)
		}
		if na.Unsealed != (id == nil) || strings.HasSuffix(err.Error(), UnsealedHint) != (id == nil) {
			t.Errorf("sealed %v: Unsealed %v, message %q", id != nil, na.Unsealed, err)
		}
	}
}

// TestSecureRekeyUnderTraffic: sessions replaced every 64 datagrams
// (secure.Options.RekeyPackets) while WRITEs and READs run without a
// pause: every operation completes, every byte read back is the one
// written, and the datagrams sealed under a session being replaced are
// still opened (nothing is refused for its SA or its tag).
func TestSecureRekeyUnderTraffic(t *testing.T) {
	a := testAuthority(t)
	sopts := secure.Options{RekeyPackets: 64}
	listen := func(role secure.Role, name string) *Endpoint {
		ep, err := Listen("127.0.0.1:0", Config{}, Options{Security: testIdentity(t, a, role, name), SecurityOptions: sopts})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ep.Close() })
		return ep
	}
	srv, cli := listen(secure.RoleMemoryNode, "mem0"), listen(secure.RoleClient, "alice")
	mem := make([]byte, 1<<20)
	key, err := srv.Register(mem, wire.PermAll, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	r, err := cli.Dial(ctx, srv.LocalAddr().String())
	if err != nil {
		t.Fatal(err)
	}
	data, got := make([]byte, 48<<10), make([]byte, 48<<10)
	for i := range 60 {
		rand.Read(data)
		off := uint64(i%16) * 4096
		if err := r.Write(ctx, key, off, data); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if err := r.Read(ctx, key, off, got); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("read %d: the bytes read back differ from those written", i)
		}
	}
	cs, ss := cli.SecurityStats(), srv.SecurityStats()
	t.Logf("rekeys: client %d, server %d; datagrams sealed %d and %d", cs.Rekeys, ss.Rekeys, cs.Sealed, ss.Sealed)
	if cs.Rekeys+ss.Rekeys < 10 {
		t.Errorf("%d and %d rekeys, want sessions replaced many times", cs.Rekeys, ss.Rekeys)
	}
	for _, st := range []secure.LayerStats{cs, ss} {
		if st.DroppedNoSA+st.DroppedAuth+st.DroppedReplay+st.HandshakesFailed != 0 {
			t.Errorf("security counters %+v: datagrams refused while sessions were replaced", st)
		}
	}
}
