package secure

import (
	"crypto/ecdh"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"
)

// The handshake that opens a pair of SAs between two processes, SIGMA-I
// style (the key exchange of IKEv2 and TLS 1.3): ephemeral X25519 for the
// keys, each side's certificate and Ed25519 signature over the transcript
// for the identities, the responder's stateless cookie first so that it
// keeps nothing for an address that has not shown it receives there.
//
//	HELLO    I → R  type 1, eph_i (32), SAID_i (4), cookie length (1), cookie
//	RETRY    R → I  type 2, cookie (cookieLen)            (no cookie, or a stale one)
//	RESPONSE R → I  type 3, eph_r (32), SAID_r (4), AEAD(cert_r, sig_r)
//	FINISH   I → R  type 4, SAID_r (4), AEAD(cert_i, sig_i)
//
// The cookie is an HMAC of the initiator's address, eph_i and SAID_i under
// a key of the responder's, per 30 s bucket: one cookie admits one
// handshake, and only from the address it was sent to.
//
// th1 = SHA-256(label, type, eph_i, SAID_i); th2 = SHA-256(th1, eph_r,
// SAID_r); sig_r = Sign(R, "responder" + th2); th3 = SHA-256(th2, cert_r,
// sig_r); sig_i = Sign(I, "initiator" + th3); th4 = SHA-256(th3, cert_i,
// sig_i). The shared secret is X25519(eph_i, eph_r); RESPONSE and FINISH
// are sealed under keys derived from it and th2, and the SAs' keys from it
// and th4, one per direction. Each side picks the SAID the other sends
// to it.

// Handshake message types.
const (
	hsHello    = 1
	hsRetry    = 2
	hsResponse = 3
	hsFinish   = 4
)

// Sizes of handshake fields.
const (
	ephLen    = 32
	cookieLen = 16
	helloLen  = 1 + ephLen + 4 + 1 // without the cookie
)

// Errors of the handshake; compare with errors.Is.
var (
	// ErrHandshake: a malformed, unexpected or unauthentic handshake
	// message, or a peer whose certificate does not verify.
	ErrHandshake = errors.New("secure: handshake failed")
	// ErrBusy: the responder holds MaxPending half-open handshakes.
	ErrBusy = errors.New("secure: too many handshakes in progress")
)

// Options are what both sides of a handshake must agree on.
type Options struct {
	Suite Suite // the SAs' AEAD (zero: AESGCM)
	// AuthenticateOnly leaves payloads readable on the wire, each
	// datagram still authenticated; the zero value encrypts them. Both
	// sides must agree: a peer that encrypts drops what the other only
	// authenticates.
	AuthenticateOnly bool
	// RekeyAge and RekeyPackets set when a Layer replaces a session by a
	// new one (Layer.RekeyAge, Layer.RekeyPackets; zero: DefaultRekeyAge
	// and RekeyAfter).
	RekeyAge     time.Duration
	RekeyPackets uint64
}

func (o Options) suite() Suite {
	if o.Suite == 0 {
		return AESGCM
	}
	return o.Suite
}

// Session is an established pair of SAs and the peer they are with.
type Session struct {
	Peer Cert
	Send *SendSA
	Recv *RecvSA
}

func hash(parts ...[]byte) [32]byte {
	h := sha256.New()
	for _, p := range parts {
		h.Write(p)
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// hsKeys derives the key sealing a RESPONSE or FINISH.
func hsKeys(shared []byte, th [32]byte, label string) (Keys, error) {
	return DeriveKeys(shared, th[:], "ndma handshake v1 "+label)
}

// sealHS seals body (a certificate and a signature) under k with a zero
// sequence number (each key seals one message).
func sealHS(k Keys, dst, body []byte) ([]byte, error) {
	a, err := newAEAD(AESGCM, k.Key[:])
	if err != nil {
		return nil, err
	}
	var nonce [12]byte
	copy(nonce[:], k.Salt[:])
	return a.Seal(dst, nonce[:], body, nil), nil
}

func openHS(k Keys, sealed []byte) ([]byte, error) {
	a, err := newAEAD(AESGCM, k.Key[:])
	if err != nil {
		return nil, err
	}
	var nonce [12]byte
	copy(nonce[:], k.Salt[:])
	body, err := a.Open(nil, nonce[:], sealed, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: sealed part does not authenticate", ErrHandshake)
	}
	return body, nil
}

// signedPart is a certificate followed by a signature of label+th.
func signedPart(id *Identity, label string, th [32]byte) []byte {
	b := appendCert(nil, &id.Cert)
	return append(b, ed25519.Sign(id.Key, append([]byte(label), th[:]...))...)
}

// checkSigned parses and checks a certificate, valid at now, and its
// signature of label+th; it returns the certificate and the bytes covered.
func checkSigned(authority ed25519.PublicKey, body []byte, label string, th [32]byte, now time.Time) (Cert, error) {
	c, rest, err := parseCert(body)
	if err != nil {
		return Cert{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if err := c.Verify(authority); err != nil {
		return Cert{}, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	if err := c.ValidAt(now); err != nil {
		return Cert{}, fmt.Errorf("%w: the %s's certificate: %w", ErrHandshake, label, err)
	}
	if len(rest) != ed25519.SignatureSize || !ed25519.Verify(c.Key, append([]byte(label), th[:]...), rest) {
		return Cert{}, fmt.Errorf("%w: %v %q: transcript signature does not verify", ErrHandshake, c.Role, c.Name)
	}
	c.Key, c.Sig = append(ed25519.PublicKey(nil), c.Key...), append([]byte(nil), c.Sig...)
	return c, nil
}

// sessionKeys derives the SAs of an established handshake.
func sessionKeys(shared []byte, th4 [32]byte) (i2r, r2i Keys, err error) {
	if i2r, err = DeriveKeys(shared, th4[:], "ndma sa v1 initiator to responder"); err != nil {
		return
	}
	r2i, err = DeriveKeys(shared, th4[:], "ndma sa v1 responder to initiator")
	return
}

// Initiator is the side that opens a handshake. Not safe for concurrent
// use.
type Initiator struct {
	id     *Identity
	opts   Options
	eph    *ecdh.PrivateKey
	said   uint32 // the SAID the responder sends to
	cookie []byte
	done   bool
}

// NewInitiator starts a handshake of identity id; said is the SAID this
// side receives on (non-zero, unique among its SAs).
func NewInitiator(id *Identity, said uint32, opts Options, rand io.Reader) (*Initiator, error) {
	if said == 0 {
		return nil, fmt.Errorf("secure: SAID 0 means none")
	}
	eph, err := ecdh.X25519().GenerateKey(rand)
	if err != nil {
		return nil, err
	}
	return &Initiator{id: id, opts: opts, eph: eph, said: said}, nil
}

// Hello is the HELLO to send (again, after a RETRY, with its cookie).
func (i *Initiator) Hello() []byte {
	b := i.helloCore()
	b = append(b, byte(len(i.cookie)))
	return append(b, i.cookie...)
}

func (i *Initiator) helloCore() []byte {
	b := append([]byte{hsHello}, i.eph.PublicKey().Bytes()...)
	return binary.BigEndian.AppendUint32(b, i.said)
}

// Handle takes the responder's message at now: a RETRY gives the HELLO to
// send again; a RESPONSE, checked (the responder's certificate valid at
// now), gives the FINISH to send and the established session.
func (i *Initiator) Handle(now time.Time, msg []byte) (out []byte, s *Session, err error) {
	if i.done || len(msg) == 0 {
		return nil, nil, fmt.Errorf("%w: unexpected message", ErrHandshake)
	}
	switch msg[0] {
	case hsRetry:
		if len(msg) != 1+cookieLen {
			return nil, nil, fmt.Errorf("%w: RETRY of %d bytes", ErrHandshake, len(msg))
		}
		i.cookie = append(i.cookie[:0], msg[1:]...)
		return i.Hello(), nil, nil
	case hsResponse:
	default:
		return nil, nil, fmt.Errorf("%w: message type %d", ErrHandshake, msg[0])
	}
	if len(msg) < 1+ephLen+4 {
		return nil, nil, fmt.Errorf("%w: short RESPONSE", ErrHandshake)
	}
	ephR, sealed := msg[1:1+ephLen], msg[1+ephLen+4:]
	saidR := binary.BigEndian.Uint32(msg[1+ephLen:])
	pub, err := ecdh.X25519().NewPublicKey(ephR)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	shared, err := i.eph.ECDH(pub)
	if err != nil || saidR == 0 {
		return nil, nil, fmt.Errorf("%w: key exchange", ErrHandshake)
	}
	th1 := hash([]byte("ndma handshake v1"), i.helloCore())
	th2 := hash(th1[:], msg[1:1+ephLen+4])
	kr, err := hsKeys(shared, th2, "response")
	if err != nil {
		return nil, nil, err
	}
	body, err := openHS(kr, sealed)
	if err != nil {
		return nil, nil, err
	}
	peer, err := checkSigned(i.id.Authority, body, "responder", th2, now)
	if err != nil {
		return nil, nil, err
	}
	th3 := hash(th2[:], body)
	mine := signedPart(i.id, "initiator", th3)
	kf, err := hsKeys(shared, th2, "finish")
	if err != nil {
		return nil, nil, err
	}
	out = binary.BigEndian.AppendUint32([]byte{hsFinish}, saidR)
	if out, err = sealHS(kf, out, mine); err != nil {
		return nil, nil, err
	}
	th4 := hash(th3[:], mine)
	i2r, r2i, err := sessionKeys(shared, th4)
	if err != nil {
		return nil, nil, err
	}
	s, err = newSession(peer, saidR, i2r, i.said, r2i, i.opts)
	if err != nil {
		return nil, nil, err
	}
	i.done = true
	return out, s, nil
}

func newSession(peer Cert, sendID uint32, send Keys, recvID uint32, recv Keys, o Options) (*Session, error) {
	ss, err := NewSendSA(sendID, o.suite(), send, !o.AuthenticateOnly)
	if err != nil {
		return nil, err
	}
	rs, err := NewRecvSA(recvID, o.suite(), recv, !o.AuthenticateOnly)
	if err != nil {
		return nil, err
	}
	return &Session{Peer: peer, Send: ss, Recv: rs}, nil
}

// Responder answers handshakes. It keeps nothing for a HELLO without a
// valid cookie (it answers RETRY, no larger than the HELLO), and at most
// MaxPending half-open handshakes, each for HandshakeTimeout. Not safe
// for concurrent use; no clock: the caller passes now.
type Responder struct {
	id        *Identity
	opts      Options
	rand      io.Reader
	cookieKey [32]byte
	pending   map[uint32]*pendingHS   // by the SAID this side chose
	byInit    map[initKey]uint32      // the same, by the initiator's address and SAID
	order     []uint32                // pending's SAIDs, oldest first (their deadlines in order)
	byAddr    map[netip.Addr][]uint32 // the same, by the initiator's IP address, oldest first
	newSAID   func() uint32
	// MaxPending bounds the half-open handshakes; MaxPendingPerAddr
	// those from one IP address (a new one beyond it replaces that
	// address's oldest, so that one host cannot fill the table);
	// HandshakeTimeout is how long one waits for its FINISH.
	MaxPending        int
	MaxPendingPerAddr int
	HandshakeTimeout  time.Duration
	// RatePerAddr is how many handshakes a second one IP address may
	// start here past the cookie (each costs a key exchange and a
	// signature), in a burst of up to BurstPerAddr; beyond, its HELLOs
	// are not answered (ErrBusy), so that one host cannot take the
	// responder's CPU from the others.
	RatePerAddr  float64
	BurstPerAddr float64
	rates        map[netip.Addr]*addrRate
}

// addrRate is a token bucket: tokens at last.
type addrRate struct {
	tokens float64
	last   time.Time
}

// maxRates bounds the addresses a Responder keeps a token bucket for; a
// bucket that has filled up again carries nothing and goes first.
const maxRates = 4096

// allowAddr takes a token from a's bucket at now, if there is one.
func (r *Responder) allowAddr(now time.Time, a netip.Addr) bool {
	if r.RatePerAddr <= 0 {
		return true
	}
	if r.rates == nil {
		r.rates = make(map[netip.Addr]*addrRate)
	}
	b := r.rates[a]
	if b == nil {
		if len(r.rates) >= maxRates {
			for k, v := range r.rates {
				if v.tokens+now.Sub(v.last).Seconds()*r.RatePerAddr >= r.BurstPerAddr {
					delete(r.rates, k)
				}
			}
			if len(r.rates) >= maxRates {
				return false
			}
		}
		b = &addrRate{tokens: r.BurstPerAddr, last: now}
		r.rates[a] = b
	}
	b.tokens = min(r.BurstPerAddr, b.tokens+now.Sub(b.last).Seconds()*r.RatePerAddr)
	b.last = now
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

type pendingHS struct {
	from     netip.AddrPort
	saidI    uint32
	shared   []byte
	th2, th3 [32]byte
	response []byte // sent again for a repeated HELLO
	ephI     [ephLen]byte
	until    time.Time
}

type initKey struct {
	from  netip.AddrPort
	saidI uint32
}

// Defaults of Responder.
const (
	DefaultMaxPending       = 1024
	DefaultPendingPerAddr   = 16
	DefaultRatePerAddr      = 256 // handshakes a second
	DefaultBurstPerAddr     = 256
	DefaultHandshakeTimeout = 5 * time.Second
	cookieBucket            = 30 * time.Second
)

// NewResponder returns a responder for identity id. newSAID draws the
// SAIDs this side receives on (non-zero, unique among its SAs).
func NewResponder(id *Identity, opts Options, rand io.Reader, newSAID func() uint32) (*Responder, error) {
	r := &Responder{id: id, opts: opts, rand: rand, pending: make(map[uint32]*pendingHS), byInit: make(map[initKey]uint32),
		byAddr: make(map[netip.Addr][]uint32), newSAID: newSAID,
		MaxPending: DefaultMaxPending, MaxPendingPerAddr: DefaultPendingPerAddr, HandshakeTimeout: DefaultHandshakeTimeout,
		RatePerAddr: DefaultRatePerAddr, BurstPerAddr: DefaultBurstPerAddr}
	if _, err := io.ReadFull(rand, r.cookieKey[:]); err != nil {
		return nil, err
	}
	return r, nil
}

// Pending is the number of half-open handshakes held.
func (r *Responder) Pending() int { return len(r.pending) }

// cookie is the responder's proof that from received a message it sent:
// an HMAC, under a key only the responder knows, of the time bucket, the
// address and the HELLO's core (the initiator's ephemeral key and SAID),
// so that one cookie admits one handshake.
func (r *Responder) cookie(bucket int64, from netip.AddrPort, core []byte) []byte {
	m := hmac.New(sha256.New, r.cookieKey[:])
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(bucket))
	m.Write(b[:])
	a, _ := from.MarshalBinary()
	m.Write(a)
	m.Write(core[1:])
	return m.Sum(nil)[:cookieLen]
}

// cookieOK reports whether the HELLO msg carries a cookie this responder
// gave from at now (in this time bucket or the one before).
func (r *Responder) cookieOK(now time.Time, from netip.AddrPort, msg []byte) bool {
	if len(msg) != helloLen+cookieLen || int(msg[helloLen-1]) != cookieLen {
		return false
	}
	core, cookie := msg[:helloLen-1], msg[helloLen:]
	bucket := now.UnixNano() / int64(cookieBucket)
	return hmac.Equal(cookie, r.cookie(bucket, from, core)) || hmac.Equal(cookie, r.cookie(bucket-1, from, core))
}

// proven reports whether HELLO msg shows that its sender receives at
// from: it carries a valid cookie.
func (r *Responder) proven(now time.Time, from netip.AddrPort, msg []byte) bool {
	return r.cookieOK(now, from, msg)
}

// pendingSAID reports whether id is the SAID of a half-open handshake.
func (r *Responder) pendingSAID(id uint32) bool { return r != nil && r.pending[id] != nil }

// Handle takes an initiator's message from address from at now: a HELLO
// without a valid cookie gets a RETRY; with one, a RESPONSE; a FINISH
// that checks establishes the session (out is nil then).
func (r *Responder) Handle(now time.Time, from netip.AddrPort, msg []byte) (out []byte, s *Session, err error) {
	if len(msg) == 0 {
		return nil, nil, fmt.Errorf("%w: empty message", ErrHandshake)
	}
	switch msg[0] {
	case hsHello:
		return r.hello(now, from, msg)
	case hsFinish:
		return r.finish(now, from, msg)
	}
	return nil, nil, fmt.Errorf("%w: message type %d", ErrHandshake, msg[0])
}

func (r *Responder) hello(now time.Time, from netip.AddrPort, msg []byte) ([]byte, *Session, error) {
	if len(msg) < helloLen || len(msg) != helloLen+int(msg[helloLen-1]) {
		return nil, nil, fmt.Errorf("%w: HELLO of %d bytes", ErrHandshake, len(msg))
	}
	core := msg[:helloLen-1]
	eph, saidI := core[1:1+ephLen], binary.BigEndian.Uint32(core[1+ephLen:])
	if !r.cookieOK(now, from, msg) {
		// Stateless: the RETRY is smaller than the HELLO.
		return append([]byte{hsRetry}, r.cookie(now.UnixNano()/int64(cookieBucket), from, core)...), nil, nil
	}
	if saidI == 0 {
		return nil, nil, fmt.Errorf("%w: SAID 0", ErrHandshake)
	}
	r.expire(now)
	if id, ok := r.byInit[initKey{from, saidI}]; ok {
		if p := r.pending[id]; string(p.ephI[:]) == string(eph) {
			return p.response, nil, nil // the same HELLO again
		}
		r.drop(id) // the initiator started over
	}
	if !r.allowAddr(now, from.Addr()) {
		return nil, nil, ErrBusy
	}
	if ids := r.byAddr[from.Addr()]; r.MaxPendingPerAddr > 0 && len(ids) >= r.MaxPendingPerAddr {
		r.drop(ids[0]) // this host's oldest: one host cannot fill the table
	}
	if len(r.pending) >= r.MaxPending {
		return nil, nil, ErrBusy
	}
	pub, err := ecdh.X25519().NewPublicKey(eph)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrHandshake, err)
	}
	mine, err := ecdh.X25519().GenerateKey(r.rand)
	if err != nil {
		return nil, nil, err
	}
	shared, err := mine.ECDH(pub)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: key exchange", ErrHandshake)
	}
	saidR := r.newSAID()
	for saidR == 0 || r.pending[saidR] != nil {
		saidR = r.newSAID()
	}
	th1 := hash([]byte("ndma handshake v1"), core)
	open := binary.BigEndian.AppendUint32(mine.PublicKey().Bytes(), saidR)
	th2 := hash(th1[:], open)
	kr, err := hsKeys(shared, th2, "response")
	if err != nil {
		return nil, nil, err
	}
	body := signedPart(r.id, "responder", th2)
	out := append([]byte{hsResponse}, open...)
	if out, err = sealHS(kr, out, body); err != nil {
		return nil, nil, err
	}
	p := &pendingHS{from: from, saidI: saidI, shared: shared, th2: th2, th3: hash(th2[:], body), response: out, until: now.Add(r.HandshakeTimeout)}
	copy(p.ephI[:], eph)
	r.pending[saidR] = p
	r.byInit[initKey{from, saidI}] = saidR
	r.byAddr[from.Addr()] = append(r.byAddr[from.Addr()], saidR)
	r.order = append(r.order, saidR)
	if len(r.order) > 2*r.MaxPending {
		// Handshakes that ended early leave their ids behind a live
		// one: keep the live ones (amortized over MaxPending HELLOs).
		live, seen := r.order[:0], make(map[uint32]bool, len(r.pending))
		for _, id := range r.order {
			if r.pending[id] != nil && !seen[id] {
				seen[id] = true
				live = append(live, id)
			}
		}
		r.order = live
	}
	return out, nil, nil
}

func (r *Responder) finish(now time.Time, from netip.AddrPort, msg []byte) ([]byte, *Session, error) {
	if len(msg) < 1+4 {
		return nil, nil, fmt.Errorf("%w: short FINISH", ErrHandshake)
	}
	saidR := binary.BigEndian.Uint32(msg[1:])
	p := r.pending[saidR]
	if p == nil || p.from != from || now.After(p.until) {
		return nil, nil, fmt.Errorf("%w: FINISH for no handshake in progress", ErrHandshake)
	}
	kf, err := hsKeys(p.shared, p.th2, "finish")
	if err != nil {
		return nil, nil, err
	}
	body, err := openHS(kf, msg[5:])
	if err != nil {
		return nil, nil, err
	}
	th3 := p.th3
	peer, err := checkSigned(r.id.Authority, body, "initiator", th3, now)
	if err != nil {
		return nil, nil, err
	}
	th4 := hash(th3[:], body)
	i2r, r2i, err := sessionKeys(p.shared, th4)
	if err != nil {
		return nil, nil, err
	}
	s, err := newSession(peer, p.saidI, r2i, saidR, i2r, r.opts)
	if err != nil {
		return nil, nil, err
	}
	r.drop(saidR)
	return nil, s, nil
}

// drop forgets half-open handshake id (its entry in order goes when it
// reaches the front).
func (r *Responder) drop(id uint32) {
	if p := r.pending[id]; p != nil {
		delete(r.byInit, initKey{p.from, p.saidI})
		delete(r.pending, id)
		a := p.from.Addr()
		ids := r.byAddr[a]
		if i := slices.Index(ids, id); i >= 0 {
			ids = slices.Delete(ids, i, i+1)
		}
		if len(ids) == 0 {
			delete(r.byAddr, a)
		} else {
			r.byAddr[a] = ids
		}
	}
}

// expire drops the half-open handshakes whose time is up, oldest first:
// their deadlines are in creation order, so each is looked at once.
func (r *Responder) expire(now time.Time) {
	n := 0
	for _, id := range r.order {
		p := r.pending[id]
		if p != nil && !now.After(p.until) {
			break
		}
		r.drop(id)
		n++
	}
	if n > 0 {
		r.order = append(r.order[:0], r.order[n:]...)
	}
}
