package secure

import (
	"bytes"
	"crypto/ed25519"
	"errors"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ndma/ndma/wire"
)

// rng is a deterministic io.Reader for keys in tests.
type rng struct{ r *rand.ChaCha8 }

func newRng(seed byte) *rng { return &rng{rand.NewChaCha8([32]byte{seed})} }

func (g *rng) Read(b []byte) (int, error) { return g.r.Read(b) }

func authority(t testing.TB, secret string) *Authority {
	t.Helper()
	a, err := NewAuthority([]byte(secret))
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func issue(t testing.TB, a *Authority, role Role, name string, seed byte) *Identity {
	t.Helper()
	id, err := a.Issue(role, name, newRng(seed))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

var (
	t0    = time.Unix(1_800_000_000, 0)
	addrI = netip.MustParseAddrPort("10.0.0.2:4791")
)

// handshake runs a full handshake between ini and res; it returns both
// sessions.
func handshake(t *testing.T, ini *Identity, res *Responder, opts Options) (*Session, *Session) {
	t.Helper()
	in, err := NewInitiator(ini, 0x1111, opts, newRng(7))
	if err != nil {
		t.Fatal(err)
	}
	hello := in.Hello()
	retry, s, err := res.Handle(t0, addrI, hello)
	if err != nil || s != nil || retry[0] != hsRetry || len(retry) > len(hello) || res.Pending() != 0 {
		t.Fatalf("first HELLO: %v, reply %d bytes (HELLO %d), %d pending", err, len(retry), len(hello), res.Pending())
	}
	hello2, s, err := in.Handle(t0, retry)
	if err != nil || s != nil {
		t.Fatalf("RETRY: %v", err)
	}
	resp, s, err := res.Handle(t0, addrI, hello2)
	if err != nil || s != nil || resp[0] != hsResponse {
		t.Fatalf("HELLO with cookie: %v", err)
	}
	fin, si, err := in.Handle(t0, resp)
	if err != nil || si == nil {
		t.Fatalf("RESPONSE: %v", err)
	}
	none, sr, err := res.Handle(t0.Add(time.Millisecond), addrI, fin)
	if err != nil || sr == nil || none != nil {
		t.Fatalf("FINISH: %v", err)
	}
	return si, sr
}

// TestHandshake: the two sides learn each other's certified identity and
// get SAs that carry packets both ways; the responder kept no state for
// the HELLO without a cookie, and keeps none after the FINISH.
func TestHandshake(t *testing.T) {
	a := authority(t, "fabric secret for the handshake test")
	cli, sw := issue(t, a, RoleClient, "trainer-3", 1), issue(t, a, RoleSwitch, "sw0", 2)
	res, err := NewResponder(sw, Options{}, newRng(3), func() uint32 { return 0x2222 })
	if err != nil {
		t.Fatal(err)
	}
	si, sr := handshake(t, cli, res, Options{})
	if si.Peer.Role != RoleSwitch || si.Peer.Name != "sw0" || sr.Peer.Role != RoleClient || sr.Peer.Name != "trainer-3" {
		t.Fatalf("peers: initiator sees %v %q, responder %v %q", si.Peer.Role, si.Peer.Name, sr.Peer.Role, sr.Peer.Name)
	}
	if !bytes.Equal(sr.Peer.Key, cli.Cert.Key) || res.Pending() != 0 {
		t.Fatalf("responder: peer key mismatch or %d handshakes left", res.Pending())
	}
	if si.Send.ID() != 0x2222 || sr.Send.ID() != 0x1111 {
		t.Fatalf("SAIDs: initiator sends on %#x, responder on %#x", si.Send.ID(), sr.Send.ID())
	}
	for _, dir := range []struct {
		from, to *Session
	}{{si, sr}, {sr, si}} {
		pkt, err := dir.from.Send.Seal(packet(t, []byte("over the new SA")))
		if err != nil {
			t.Fatal(err)
		}
		var h wire.Header
		if _, _, err := wire.Parse(pkt, &h); err != nil {
			t.Fatal(err)
		}
		if got, err := dir.to.Recv.Open(&h, pkt); err != nil || string(got) != "over the new SA" {
			t.Fatalf("packet over the session: %v", err)
		}
	}
}

// TestHandshakeRefuses: a peer certified by another fabric, a changed
// byte in RESPONSE or FINISH, a FINISH from another address, a stale
// cookie, and a full table are refused; refusals keep no state.
func TestHandshakeRefuses(t *testing.T) {
	a := authority(t, "fabric secret for the handshake test")
	sw := issue(t, a, RoleSwitch, "sw0", 2)
	newRes := func() *Responder {
		n := uint32(0x100)
		r, err := NewResponder(sw, Options{}, newRng(3), func() uint32 { n++; return n })
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Certified by another fabric's authority.
	other := issue(t, authority(t, "another fabric's secret........"), RoleMemoryNode, "mem0", 4)
	res := newRes()
	in, _ := NewInitiator(other, 9, Options{}, newRng(5))
	retry, _, _ := res.Handle(t0, addrI, in.Hello())
	h2, _, _ := in.Handle(t0, retry)
	resp, _, _ := res.Handle(t0, addrI, h2)
	if _, _, err := in.Handle(t0, resp); !errors.Is(err, ErrHandshake) {
		t.Errorf("initiator of another fabric accepted the switch: %v", err)
	}

	mem := issue(t, a, RoleMemoryNode, "mem0", 6)
	run := func() (*Initiator, []byte, *Responder) {
		res := newRes()
		in, _ := NewInitiator(mem, 9, Options{}, newRng(5))
		retry, _, _ := res.Handle(t0, addrI, in.Hello())
		h2, _, _ := in.Handle(t0, retry)
		resp, _, err := res.Handle(t0, addrI, h2)
		if err != nil {
			t.Fatal(err)
		}
		return in, resp, res
	}
	for _, pos := range []int{1, 33, 40, 60} {
		in, resp, _ := run()
		resp = bytes.Clone(resp)
		resp[pos%len(resp)] ^= 1
		if _, s, err := in.Handle(t0, resp); err == nil || s != nil {
			t.Errorf("RESPONSE byte %d changed: accepted", pos)
		}
	}
	in, resp, res = run()
	fin, _, err := in.Handle(t0, resp)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(fin)
	bad[len(bad)-3] ^= 1
	if _, s, err := res.Handle(t0, addrI, bad); !errors.Is(err, ErrHandshake) || s != nil {
		t.Errorf("changed FINISH: %v", err)
	}
	if _, s, err := res.Handle(t0, netip.MustParseAddrPort("10.9.9.9:1"), fin); !errors.Is(err, ErrHandshake) || s != nil {
		t.Errorf("FINISH from another address: %v", err)
	}
	if _, s, err := res.Handle(t0.Add(time.Minute), addrI, fin); !errors.Is(err, ErrHandshake) || s != nil {
		t.Errorf("FINISH after the handshake timeout: %v", err)
	}
	// A cookie two buckets old gets a new RETRY, not a RESPONSE.
	res = newRes()
	in, _ = NewInitiator(mem, 9, Options{}, newRng(5))
	retry, _, _ = res.Handle(t0, addrI, in.Hello())
	h2, _, _ = in.Handle(t0, retry)
	if out, _, _ := res.Handle(t0.Add(2*cookieBucket), addrI, h2); len(out) == 0 || out[0] != hsRetry || res.Pending() != 0 {
		t.Errorf("stale cookie: answered type %v, %d pending", out, res.Pending())
	}
	// A bounded table: beyond MaxPending, HELLOs are refused until the
	// oldest expire.
	res = newRes()
	res.MaxPending = 3
	for i := range 5 {
		from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 1, byte(i)}), 4791)
		in, _ := NewInitiator(mem, uint32(i+1), Options{}, newRng(byte(i)))
		retry, _, _ := res.Handle(t0, from, in.Hello())
		h2, _, _ := in.Handle(t0, retry)
		_, _, err := res.Handle(t0, from, h2)
		if i < 3 && err != nil || i >= 3 && !errors.Is(err, ErrBusy) {
			t.Fatalf("HELLO %d with 3 allowed: %v", i, err)
		}
	}
	from := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 2, 1}), 4791)
	in, _ = NewInitiator(mem, 77, Options{}, newRng(9))
	later := t0.Add(DefaultHandshakeTimeout + time.Second)
	retry, _, _ = res.Handle(later, from, in.Hello())
	h2, _, _ = in.Handle(t0, retry)
	if _, _, err := res.Handle(later, from, h2); err != nil || res.Pending() != 1 {
		t.Fatalf("HELLO after the others expired: %v, %d pending", err, res.Pending())
	}
}

// TestIdentity: certificates verify under their own fabric's authority
// only, and any changed field breaks them; bad identities are refused.
func TestIdentity(t *testing.T) {
	a := authority(t, "the fabric secret, 32 bytes long")
	id := issue(t, a, RoleMemoryNode, "mem-1", 1)
	if err := id.Cert.Verify(a.Public()); err != nil {
		t.Fatal(err)
	}
	if again := authority(t, "the fabric secret, 32 bytes long"); !again.Public().Equal(a.Public()) {
		t.Fatal("the authority is not derived deterministically from the secret")
	}
	other := authority(t, "another fabric secret, 32 bytes")
	if err := id.Cert.Verify(other.Public()); !errors.Is(err, ErrIdentity) {
		t.Errorf("certificate verified under another fabric: %v", err)
	}
	for _, mut := range []func(c *Cert){
		func(c *Cert) { c.Role = RoleSwitch },
		func(c *Cert) { c.Name = "mem-2" },
		func(c *Cert) { c.Key = append(ed25519.PublicKey(nil), c.Key...); c.Key[0] ^= 1 },
	} {
		c := id.Cert
		mut(&c)
		if err := c.Verify(a.Public()); !errors.Is(err, ErrIdentity) {
			t.Errorf("changed certificate verified: %+v", c)
		}
	}
	if _, err := NewAuthority([]byte("short")); !errors.Is(err, ErrIdentity) {
		t.Errorf("short fabric secret: %v", err)
	}
	for _, bad := range []struct {
		role Role
		name string
	}{{0, "x"}, {5, "x"}, {RoleClient, ""}, {RoleClient, string(make([]byte, MaxNameLen+1))}} {
		if _, err := a.Issue(bad.role, bad.name, newRng(1)); !errors.Is(err, ErrIdentity) {
			t.Errorf("Issue(%v, %d-byte name): %v", bad.role, len(bad.name), err)
		}
	}
}

func BenchmarkHandshake(b *testing.B) {
	a := authority(b, "fabric secret for the handshake test")
	cli, sw := issue(b, a, RoleClient, "c", 1), issue(b, a, RoleSwitch, "s", 2)
	n := uint32(0)
	res, _ := NewResponder(sw, Options{}, newRng(3), func() uint32 { n++; return n })
	for b.Loop() {
		in, _ := NewInitiator(cli, 5, Options{}, newRng(4))
		retry, _, _ := res.Handle(t0, addrI, in.Hello())
		h2, _, _ := in.Handle(t0, retry)
		resp, _, _ := res.Handle(t0, addrI, h2)
		fin, _, err := in.Handle(t0, resp)
		if err != nil {
			b.Fatal(err)
		}
		if _, s, err := res.Handle(t0, addrI, fin); err != nil || s == nil {
			b.Fatal(err)
		}
	}
}
