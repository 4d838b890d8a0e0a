package secure

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/ndma/ndma/wire"
	"golang.org/x/crypto/chacha20poly1305"
)

// Suite is an SA's AEAD.
type Suite uint8

// AEAD suites.
const (
	// AESGCM is AES-256-GCM (hardware-accelerated where the CPU has
	// AES-NI/PMULL, which Go's crypto uses).
	AESGCM Suite = 1
	// ChaCha20Poly1305 is ChaCha20-Poly1305 (RFC 8439), for CPUs without
	// AES instructions.
	ChaCha20Poly1305 Suite = 2
)

func (s Suite) String() string {
	switch s {
	case AESGCM:
		return "aes-256-gcm"
	case ChaCha20Poly1305:
		return "chacha20-poly1305"
	}
	return fmt.Sprintf("suite(%d)", uint8(s))
}

// KeyLen and SaltLen are the sizes of an SA's key and nonce salt.
const (
	KeyLen  = 32
	SaltLen = 4
)

// Keys are one direction's AEAD key and nonce salt.
type Keys struct {
	Key  [KeyLen]byte
	Salt [SaltLen]byte
}

// DeriveKeys derives one direction's Keys from a shared secret with HKDF
// (SHA-256): info is a label naming the direction and whatever binds the
// keys to their use (the SA id, the parties' identities, the handshake's
// nonces).
func DeriveKeys(secret, salt []byte, info string) (Keys, error) {
	var k Keys
	b, err := hkdf.Key(sha256.New, secret, salt, info, KeyLen+SaltLen)
	if err != nil {
		return k, err
	}
	copy(k.Key[:], b)
	copy(k.Salt[:], b[KeyLen:])
	return k, nil
}

// Errors of Open and Seal; compare with errors.Is.
var (
	// ErrAuth: the tag does not match (a wrong key, a changed byte in
	// header or payload, or a sequence number other than the sender's).
	ErrAuth = errors.New("secure: packet authentication failed")
	// ErrReplay: the sequence number was seen before, or lies behind the
	// anti-replay window.
	ErrReplay = errors.New("secure: replayed or too old packet")
	// ErrNotSealed: the packet has no FlagAuth, names another SA, or is
	// too short.
	ErrNotSealed = errors.New("secure: packet not sealed for this SA")
	// ErrExhausted: the SA's sequence numbers are used up (its nonce
	// would repeat): a new SA must replace it.
	ErrExhausted = errors.New("secure: SA sequence numbers exhausted")
)

// Limits of an SA's life.
const (
	// RekeyAfter is the number of packets after which NeedsRekey reports
	// that the SA should be replaced: far below the 2^64 nonce space and
	// below AES-GCM's bound on the data one key may protect.
	RekeyAfter = 1 << 48
	// maxSeq is the last sequence number Seal uses.
	maxSeq = math.MaxUint64 - 1
)

// newAEAD returns the suite's AEAD under key.
func newAEAD(s Suite, key []byte) (cipher.AEAD, error) {
	switch s {
	case AESGCM:
		b, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		return cipher.NewGCM(b)
	case ChaCha20Poly1305:
		return chacha20poly1305.New(key)
	}
	return nil, fmt.Errorf("secure: unknown suite %d", uint8(s))
}

// aadLen is the associated data: the 96-byte header (its CRC field zero)
// and the high 32 bits of the sequence number.
const aadLen = wire.HeaderLen + 4

// crcOff is the header's CRC32C field (wire.Seal computes it).
const crcOff = 92

// sa is what both directions share.
type sa struct {
	id      uint32
	aead    cipher.AEAD
	salt    [SaltLen]byte
	encrypt bool
	nonce   [12]byte
	aad     [aadLen]byte
	scratch []byte // associated data with the payload (authenticated-only SAs)
}

// aadWith returns the associated data followed by payload (an
// authenticated-only SA authenticates the payload as associated data).
func (s *sa) aadWith(payload []byte) []byte {
	s.scratch = append(append(s.scratch[:0], s.aad[:]...), payload...)
	return s.scratch
}

func newSA(id uint32, suite Suite, k Keys, encrypt bool) (sa, error) {
	if id == 0 {
		return sa{}, fmt.Errorf("secure: SA id 0 means none")
	}
	a, err := newAEAD(suite, k.Key[:])
	if err != nil {
		return sa{}, err
	}
	if a.NonceSize() != 12 || a.Overhead() != wire.TagLen {
		return sa{}, fmt.Errorf("secure: suite %v has a %d-byte nonce and %d-byte tag", suite, a.NonceSize(), a.Overhead())
	}
	return sa{id: id, aead: a, salt: k.Salt, encrypt: encrypt}, nil
}

// The header's crypt region: Addr, Key, Operand1 and Operand2, which an
// encrypting SA encrypts with the payload (the region key is a
// capability: it never crosses in clear).
const (
	cryptOff = 48
	cryptEnd = 80
	cryptLen = cryptEnd - cryptOff
)

// movedOff is where the crypt region sits while it is encrypted or
// decrypted: just before the payload, so that the AEAD works on one
// contiguous slice in place (no copy of the payload).
const movedOff = wire.HeaderLen - cryptLen

// toFront moves pkt's crypt region next to its payload and returns the
// header bytes it covers there (from cryptEnd on), which toHeader puts
// back.
func (s *sa) toFront(pkt []byte) (tail [wire.HeaderLen - cryptEnd]byte) {
	copy(tail[:], pkt[cryptEnd:wire.HeaderLen])
	copy(pkt[movedOff:wire.HeaderLen], pkt[cryptOff:cryptEnd])
	return tail
}

// toHeader moves the crypt region back into the header and restores the
// header bytes toFront saved.
func (s *sa) toHeader(pkt []byte, tail [wire.HeaderLen - cryptEnd]byte) {
	copy(pkt[cryptOff:cryptEnd], pkt[movedOff:wire.HeaderLen])
	copy(pkt[cryptEnd:wire.HeaderLen], tail[:])
}

// prepare fills the nonce and the associated data for seq from the
// header bytes hdr (whose CRC field, and for an encrypting SA whose
// crypt region, are taken as zero).
func (s *sa) prepare(hdr []byte, seq uint64) {
	copy(s.nonce[:SaltLen], s.salt[:])
	binary.BigEndian.PutUint64(s.nonce[SaltLen:], seq)
	copy(s.aad[:wire.HeaderLen], hdr[:wire.HeaderLen])
	clear(s.aad[crcOff : crcOff+4])
	if s.encrypt {
		clear(s.aad[cryptOff:cryptEnd])
	}
	binary.BigEndian.PutUint32(s.aad[wire.HeaderLen:], uint32(seq>>32))
}

// SendSA seals the packets one sender sends in one security association.
// Not safe for concurrent use.
type SendSA struct {
	sa
	seq uint64 // last sequence number used; 0: none yet
}

// NewSendSA returns the sending side of SA id (the receiver's SA id) with
// keys k. encrypt false authenticates payloads without encrypting them
// (the operator's choice for data that needs integrity only).
func NewSendSA(id uint32, suite Suite, k Keys, encrypt bool) (*SendSA, error) {
	s, err := newSA(id, suite, k, encrypt)
	if err != nil {
		return nil, err
	}
	return &SendSA{sa: s}, nil
}

// ID is the SA id the packets carry.
func (s *SendSA) ID() uint32 { return s.id }

// Seq is the last sequence number used (0: none).
func (s *SendSA) Seq() uint64 { return s.seq }

// NeedsRekey reports whether the SA has sealed RekeyAfter packets and
// should be replaced by a new one.
func (s *SendSA) NeedsRekey() bool { return s.seq >= RekeyAfter }

// Seal protects pkt, an encoded wire packet (header and payload, as
// wire.AppendPacket makes it, without a tag): it sets FlagAuth, the SA id
// and the low sequence bits in the header, encrypts the payload in place
// (unless the SA only authenticates), appends the tag and seals the
// header's CRC. pkt's capacity should hold wire.TagLen more bytes (else
// Seal allocates). It returns the sealed packet.
func (s *SendSA) Seal(pkt []byte) ([]byte, error) {
	if len(pkt) < wire.HeaderLen {
		return pkt, ErrNotSealed
	}
	if s.seq >= maxSeq {
		return pkt, ErrExhausted
	}
	if cap(pkt)-len(pkt) < wire.TagLen {
		// The AEAD writes in place: give it room for the tag.
		pkt = append(make([]byte, 0, len(pkt)+wire.TagLen), pkt...)
	}
	s.seq++
	seq := s.seq
	pkt[3] |= byte(wire.FlagAuth)
	binary.BigEndian.PutUint32(pkt[12:], s.id)
	binary.BigEndian.PutUint32(pkt[88:], uint32(seq))
	s.prepare(pkt, seq)
	payload := pkt[wire.HeaderLen:]
	var out []byte
	if s.encrypt {
		// The header's crypt region (address, region key, operands)
		// and the payload are encrypted together, in place: the region
		// is moved next to the payload for the AEAD, and its ciphertext
		// moved back into the header.
		tail := s.toFront(pkt)
		ct := s.aead.Seal(pkt[movedOff:movedOff], s.nonce[:], pkt[movedOff:], s.aad[:])
		s.toHeader(pkt, tail)
		out = payload[:len(ct)-cryptLen]
	} else {
		// Authenticated only: the tag goes after the payload.
		out = s.aead.Seal(payload, s.nonce[:], nil, s.aadWith(payload))
	}
	pkt = pkt[:wire.HeaderLen+len(out)]
	wire.Seal(pkt[:len(pkt)-wire.TagLen])
	return pkt, nil
}

// RecvSA opens the packets of one security association. Not safe for
// concurrent use.
type RecvSA struct {
	sa
	win Window
}

// NewRecvSA returns the receiving side of SA id with keys k (encrypt as
// the sender's).
func NewRecvSA(id uint32, suite Suite, k Keys, encrypt bool) (*RecvSA, error) {
	s, err := newSA(id, suite, k, encrypt)
	if err != nil {
		return nil, err
	}
	return &RecvSA{sa: s}, nil
}

// ID is the SA's id.
func (r *RecvSA) ID() uint32 { return r.id }

// Open checks and opens pkt in place, a datagram whose header h was
// decoded by wire.Parse (which checked its CRC and layout): it infers the
// sequence number, refuses a replay before any cryptography, checks the
// tag, decrypts the payload and only then records the sequence number.
// It returns the plaintext payload, a sub-slice of pkt. A packet refused
// leaves the SA as it was.
func (r *RecvSA) Open(h *wire.Header, pkt []byte) ([]byte, error) {
	if h.Flags&wire.FlagAuth == 0 || h.SAID != r.id || len(pkt) != wire.HeaderLen+int(h.Len)+wire.TagLen {
		return nil, ErrNotSealed
	}
	seq, ok := r.win.Check(h.SASeq)
	if !ok {
		return nil, ErrReplay
	}
	r.prepare(pkt, seq)
	body := pkt[wire.HeaderLen:]
	var plain []byte
	if r.encrypt {
		tail := r.toFront(pkt)
		pt, err := r.aead.Open(pkt[movedOff:movedOff], r.nonce[:], pkt[movedOff:], r.aad[:])
		if err != nil {
			return nil, ErrAuth
		}
		r.toHeader(pkt, tail)
		plain = body[:len(pt)-cryptLen]
	} else {
		payload, tag := body[:len(body)-wire.TagLen], body[len(body)-wire.TagLen:]
		if _, err := r.aead.Open(nil, r.nonce[:], tag, r.aadWith(payload)); err != nil {
			return nil, ErrAuth
		}
		plain = payload
	}
	r.win.Accept(seq)
	return plain, nil
}
