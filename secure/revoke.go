package secure

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// A revocation list names the certificates the fabric's authority has
// withdrawn before their end, by the SHA-256 hash of the key each
// certifies. It is public (it holds no secret) and signed by the
// authority, and every list carries a number one higher than the one it
// replaces, so that a process holding a list refuses an older one
// (Policy.Load). As a file:
//
//	NDMA REVOCATIONS v1
//	authority: <base64 of the authority's 32-byte Ed25519 public key>
//	number: 7
//	issued: 2026-12-06T10:00:00Z
//	revoked: SHA256:<unpadded base64 of a key's SHA-256 hash>
//	revoked: ...
//	signature: <base64 of the authority's 64-byte signature>
//
// The first line is the format's name and version; the fields follow in
// any order, each once but revoked (any number of times, each key once);
// '#' lines and empty lines are ignored. The authority signs
// revocationsSigned: a label, its own public key, the number, the time of
// issue (Unix seconds) and the sorted hashes.

// KeyHash is the SHA-256 hash of a certificate's public key, which a
// revocation list names; its String is the key's Fingerprint.
type KeyHash [sha256.Size]byte

// HashKey returns pub's KeyHash.
func HashKey(pub ed25519.PublicKey) KeyHash { return sha256.Sum256(pub) }

func (h KeyHash) String() string { return "SHA256:" + base64.RawStdEncoding.EncodeToString(h[:]) }

// ParseKeyHash reads a key's hash as Fingerprint writes it
// ("SHA256:" and 43 characters of unpadded base64) or as 64 hexadecimal
// digits.
func ParseKeyHash(s string) (KeyHash, error) {
	var h KeyHash
	var b []byte
	var err error
	if rest, ok := strings.CutPrefix(s, "SHA256:"); ok {
		b, err = base64.RawStdEncoding.Strict().DecodeString(rest)
	} else {
		b, err = hex.DecodeString(s)
	}
	if err != nil || len(b) != len(h) {
		return h, fmt.Errorf("%w: not a key fingerprint (want SHA256: and 43 characters of base64, or 64 hexadecimal digits)", ErrRevocations)
	}
	copy(h[:], b)
	return h, nil
}

// MaxRevoked bounds the keys a revocation list names.
const MaxRevoked = 1 << 16

// Errors of revocation lists; compare with errors.Is.
var (
	// ErrRevocations wraps every reason a revocation list is refused.
	ErrRevocations = errors.New("secure: bad revocation list")
	// ErrRollback: a list numbered below the one already held, or
	// another list of the same number.
	ErrRollback = fmt.Errorf("%w: older than the list held", ErrRevocations)
	// ErrRevoked: a certificate the authority's revocation list names.
	// It matches ErrIdentity.
	ErrRevoked = fmt.Errorf("%w: certificate revoked", ErrIdentity)
)

// Revocations is a revocation list, signed by the authority.
type Revocations struct {
	Authority ed25519.PublicKey
	Number    uint64    // one more than the list it replaces; the first is 1
	Issued    time.Time // when it was signed, in whole seconds
	revoked   []KeyHash // sorted, each once
	Sig       []byte
}

// Keys returns the hashes of the keys rl revokes, sorted.
func (rl *Revocations) Keys() []KeyHash { return slices.Clone(rl.revoked) }

// Len is the number of keys rl revokes.
func (rl *Revocations) Len() int { return len(rl.revoked) }

// Revoked reports whether rl names c's key.
func (rl *Revocations) Revoked(c *Cert) bool {
	_, found := slices.BinarySearchFunc(rl.revoked, HashKey(c.Key), func(a, b KeyHash) int { return bytes.Compare(a[:], b[:]) })
	return found
}

// revocationsSigned is what the authority signs.
func (rl *Revocations) revocationsSigned() []byte {
	b := append([]byte("ndma revocations v1\x00"), rl.Authority...)
	b = binary.BigEndian.AppendUint64(b, rl.Number)
	b = binary.BigEndian.AppendUint64(b, uint64(rl.Issued.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(len(rl.revoked)))
	for _, h := range rl.revoked {
		b = append(b, h[:]...)
	}
	return b
}

// Verify checks that authority signed rl.
func (rl *Revocations) Verify(authority ed25519.PublicKey) error {
	switch {
	case len(authority) != ed25519.PublicKeySize || !authority.Equal(rl.Authority):
		return fmt.Errorf("%w: issued by another authority (%s), not this fabric's", ErrRevocations, Fingerprint(rl.Authority))
	case len(rl.Sig) != ed25519.SignatureSize || !ed25519.Verify(authority, rl.revocationsSigned(), rl.Sig):
		return fmt.Errorf("%w: number %d: not signed by its authority", ErrRevocations, rl.Number)
	}
	return nil
}

// Revoke returns the revocation list that follows prev (nil: the first,
// number 1): prev's keys and keys, numbered one higher, issued at issued
// (whole seconds are kept) and signed by a. prev must be a's.
func (a *Authority) Revoke(prev *Revocations, issued time.Time, keys ...KeyHash) (*Revocations, error) {
	rl := &Revocations{Authority: a.Public(), Number: 1, Issued: time.Unix(issued.Unix(), 0).UTC()}
	if prev != nil {
		if err := prev.Verify(rl.Authority); err != nil {
			return nil, err
		}
		rl.Number = prev.Number + 1
		rl.revoked = slices.Clone(prev.revoked)
	}
	if rl.Number == 0 || issued.Unix() < 0 || issued.After(MaxCertTime) {
		return nil, fmt.Errorf("%w: number %d issued %s", ErrRevocations, rl.Number, issued.UTC().Format(time.RFC3339))
	}
	rl.revoked = append(rl.revoked, keys...)
	slices.SortFunc(rl.revoked, func(a, b KeyHash) int { return bytes.Compare(a[:], b[:]) })
	rl.revoked = slices.Compact(rl.revoked)
	if len(rl.revoked) > MaxRevoked {
		return nil, fmt.Errorf("%w: %d keys, at most %d", ErrRevocations, len(rl.revoked), MaxRevoked)
	}
	rl.Sig = ed25519.Sign(a.priv, rl.revocationsSigned())
	return rl, nil
}

// revocations file header and fields.
const (
	revHeader       = "NDMA REVOCATIONS v1"
	revFieldAuth    = "authority"
	revFieldNumber  = "number"
	revFieldIssued  = "issued"
	revFieldRevoked = "revoked"
	revFieldSig     = "signature"
)

// Encode writes rl as a revocation list file (see ParseRevocations).
func (rl *Revocations) Encode() []byte {
	var b bytes.Buffer
	b64 := base64.StdEncoding.EncodeToString
	fmt.Fprintf(&b, "%s\n", revHeader)
	fmt.Fprintf(&b, "# credentials withdrawn by an NDMA fabric's authority (public, signed)\n")
	fmt.Fprintf(&b, "%s: %s\n", revFieldAuth, b64(rl.Authority))
	fmt.Fprintf(&b, "%s: %d\n", revFieldNumber, rl.Number)
	fmt.Fprintf(&b, "%s: %s\n", revFieldIssued, rl.Issued.UTC().Format(time.RFC3339))
	for _, h := range rl.revoked {
		fmt.Fprintf(&b, "%s: %s\n", revFieldRevoked, h)
	}
	fmt.Fprintf(&b, "%s: %s\n", revFieldSig, b64(rl.Sig))
	return b.Bytes()
}

// ParseRevocations reads a revocation list file written by Encode and
// checks its signature against the authority it names. It refuses (an
// error wrapping ErrRevocations, naming the line) a file of another
// format, an unknown, repeated or missing field, a key revoked twice, more
// than MaxRevoked keys, a malformed value or a bad signature.
//
// The caller checks that the list is its fabric's: Verify with the
// fabric's authority, or Policy.Load, which does.
func ParseRevocations(b []byte) (*Revocations, error) {
	var rl Revocations
	var seen [4]int // authority, number, issued, signature: line numbers
	fields := [...]string{revFieldAuth, revFieldNumber, revFieldIssued, revFieldSig}
	header := false
	for i, line := range strings.Split(string(b), "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if !header {
			if line != revHeader {
				return nil, fmt.Errorf("%w: line %d: not an NDMA revocation list (want %q first)", ErrRevocations, n, revHeader)
			}
			header = true
			continue
		}
		name, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: want \"field: value\"", ErrRevocations, n)
		}
		v = strings.TrimPrefix(v, " ")
		if name == revFieldRevoked {
			h, err := ParseKeyHash(v)
			if err != nil {
				return nil, fmt.Errorf("%w: line %d: revoked: not a key fingerprint", ErrRevocations, n)
			}
			if len(rl.revoked) == MaxRevoked {
				return nil, fmt.Errorf("%w: line %d: more than %d keys", ErrRevocations, n, MaxRevoked)
			}
			rl.revoked = append(rl.revoked, h)
			continue
		}
		f := slices.Index(fields[:], name)
		switch {
		case f < 0:
			return nil, fmt.Errorf("%w: line %d: unknown field (want one of %s, %s)", ErrRevocations, n, strings.Join(fields[:], ", "), revFieldRevoked)
		case seen[f] != 0:
			return nil, fmt.Errorf("%w: line %d: %s given again (first on line %d)", ErrRevocations, n, name, seen[f])
		}
		seen[f] = n
		var err error
		switch name {
		case revFieldAuth:
			rl.Authority, err = decodeSized(v, ed25519.PublicKeySize)
		case revFieldSig:
			rl.Sig, err = decodeSized(v, ed25519.SignatureSize)
		case revFieldNumber:
			rl.Number, err = strconv.ParseUint(v, 10, 64)
			if err == nil && rl.Number == 0 {
				err = errors.New("numbers begin at 1")
			} else if err != nil {
				err = errors.New("want a decimal number")
			}
		case revFieldIssued:
			rl.Issued, err = parseCertTime(v)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: line %d: %s: %w", ErrRevocations, n, name, err)
		}
	}
	if !header {
		return nil, fmt.Errorf("%w: empty: not an NDMA revocation list", ErrRevocations)
	}
	for j, f := range fields {
		if seen[j] == 0 {
			return nil, fmt.Errorf("%w: no %s field (truncated?)", ErrRevocations, f)
		}
	}
	slices.SortFunc(rl.revoked, func(a, b KeyHash) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(rl.revoked); i++ {
		if rl.revoked[i] == rl.revoked[i-1] {
			return nil, fmt.Errorf("%w: %s revoked twice", ErrRevocations, rl.revoked[i])
		}
	}
	if err := rl.Verify(rl.Authority); err != nil {
		return nil, err
	}
	return &rl, nil
}

// decodeSized decodes standard padded base64 of size bytes; its error
// does not show the text.
func decodeSized(v string, size int) ([]byte, error) {
	b, err := base64.StdEncoding.Strict().DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("bad base64: %w", err) // an offset, never the data
	}
	if len(b) != size {
		return nil, fmt.Errorf("%d bytes, want %d", len(b), size)
	}
	return b, nil
}

// Policy decides whether a peer's certificate is to be taken at a given
// time: signed by the fabric's authority (the handshake checks that),
// within its period of validity, and not revoked by the latest revocation
// list loaded. A process checks every peer with it when the handshake
// completes and again, periodically, for the sessions it keeps, so that a
// certificate that expires or is revoked loses its sessions within one
// period. Safe for concurrent use: Check never blocks on Load.
type Policy struct {
	authority ed25519.PublicKey
	mu        sync.Mutex // serialises Load
	list      atomic.Pointer[Revocations]
}

// NewPolicy returns the policy of the fabric whose authority's public key
// is authority, without a revocation list.
func NewPolicy(authority ed25519.PublicKey) *Policy {
	return &Policy{authority: append(ed25519.PublicKey(nil), authority...)}
}

// Load makes rl the policy's revocation list. It refuses a list the
// fabric's authority did not sign, and one numbered below the list held
// or numbered the same with other contents (ErrRollback); loading the
// list held again changes nothing.
func (p *Policy) Load(rl *Revocations) error {
	if err := rl.Verify(p.authority); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if cur := p.list.Load(); cur != nil {
		switch {
		case rl.Number < cur.Number:
			return fmt.Errorf("%w: number %d, the list held is number %d", ErrRollback, rl.Number, cur.Number)
		case rl.Number == cur.Number && !bytes.Equal(rl.Sig, cur.Sig):
			return fmt.Errorf("%w: another list numbered %d than the one held", ErrRollback, rl.Number)
		case rl.Number == cur.Number:
			return nil
		}
	}
	p.list.Store(rl)
	return nil
}

// Revocations returns the revocation list held, or nil.
func (p *Policy) Revocations() *Revocations { return p.list.Load() }

// Check returns why c is not to be taken at now (ErrExpired,
// ErrNotYetValid, ErrRevoked; each names the role and the name), or nil.
// c is a certificate the handshake verified against the authority.
func (p *Policy) Check(now time.Time, c *Cert) error {
	if err := c.ValidAt(now); err != nil {
		return err
	}
	if rl := p.list.Load(); rl != nil && rl.Revoked(c) {
		return fmt.Errorf("%w: %v %q (key %s) by revocation list number %d", ErrRevoked, c.Role, c.Name, Fingerprint(c.Key), rl.Number)
	}
	return nil
}
