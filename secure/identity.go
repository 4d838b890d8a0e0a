package secure

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"
)

// Role is what a process is to the fabric. An identity's role is part of
// its certificate, so a credential of one role gives nothing of another's:
// a client cannot pose as a memory node or as the switch.
type Role uint8

// Roles.
const (
	RoleClient     Role = 1 // uses the pool and one-sided operations
	RoleMember     Role = 2 // a rank of a job
	RoleMemoryNode Role = 3 // lends memory to the pool
	RoleSwitch     Role = 4 // the forwarding node
)

func (r Role) String() string {
	switch r {
	case RoleClient:
		return "client"
	case RoleMember:
		return "member"
	case RoleMemoryNode:
		return "memory node"
	case RoleSwitch:
		return "switch"
	}
	return fmt.Sprintf("role(%d)", uint8(r))
}

// MaxNameLen bounds an identity's name, in bytes.
const MaxNameLen = 64

// MinSecretLen is the shortest fabric secret accepted, in bytes.
const MinSecretLen = 16

// ErrIdentity wraps an identity that cannot be issued or a certificate
// that does not verify.
var ErrIdentity = errors.New("secure: bad identity")

// Authority is the fabric's certificate authority: an Ed25519 key pair
// derived from the fabric secret with HKDF, so whoever holds the secret
// (the administrator, `ndma` commands that issue credentials) can issue
// identities, and everyone checks them with the public key alone.
type Authority struct {
	priv ed25519.PrivateKey
}

// NewAuthority derives the fabric's authority from its secret.
func NewAuthority(fabricSecret []byte) (*Authority, error) {
	if len(fabricSecret) < MinSecretLen {
		return nil, fmt.Errorf("%w: fabric secret of %d bytes, want at least %d", ErrIdentity, len(fabricSecret), MinSecretLen)
	}
	seed, err := hkdf.Key(sha256.New, fabricSecret, []byte("ndma authority v1"), "ed25519 seed", ed25519.SeedSize)
	if err != nil {
		return nil, err
	}
	return &Authority{priv: ed25519.NewKeyFromSeed(seed)}, nil
}

// Public is the authority's public key, which every process of the fabric
// needs to check certificates.
func (a *Authority) Public() ed25519.PublicKey { return a.priv.Public().(ed25519.PublicKey) }

// Cert binds a role and a name to an Ed25519 public key for a period of
// time, signed by the fabric's authority.
type Cert struct {
	Role Role
	Name string
	// NotBefore and NotAfter bound the period the certificate is valid
	// in, both included, in whole seconds (ValidAt); they are part of
	// what the authority signs.
	NotBefore, NotAfter time.Time
	Key                 ed25519.PublicKey
	Sig                 []byte // the authority's signature of the rest (certSigned)
}

// ClockSkew is how far apart two processes' clocks may be: a certificate
// is taken this long before its NotBefore and after its NotAfter.
const ClockSkew = 5 * time.Minute

// MaxCertTime is the latest time a certificate may name, the last second
// of the year 9999 (a time RFC 3339 can write).
var MaxCertTime = time.Unix(maxCertUnix, 0).UTC()

const maxCertUnix = 253402300799 // 9999-12-31T23:59:59Z

// Errors of a certificate outside its period of validity. Both match
// ErrIdentity.
var (
	ErrExpired     = fmt.Errorf("%w: certificate expired", ErrIdentity)
	ErrNotYetValid = fmt.Errorf("%w: certificate not yet valid", ErrIdentity)
)

// certSigned is what the authority signs: a label, the role, the name,
// the period of validity and the key.
func (c *Cert) certSigned() []byte {
	b := append([]byte("ndma cert v2\x00"), byte(c.Role), byte(len(c.Name)))
	b = append(b, c.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.NotBefore.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(c.NotAfter.Unix()))
	return append(b, c.Key...)
}

// checkPeriod checks that a certificate's period of validity is one the
// encoding can carry: whole seconds from the Unix epoch to MaxCertTime,
// NotBefore not after NotAfter.
func checkPeriod(notBefore, notAfter time.Time) error {
	switch {
	case notBefore.Nanosecond() != 0 || notAfter.Nanosecond() != 0:
		return fmt.Errorf("%w: period of validity not in whole seconds", ErrIdentity)
	case notBefore.Unix() < 0 || notAfter.After(MaxCertTime):
		return fmt.Errorf("%w: period of validity outside 1970 to %s", ErrIdentity, MaxCertTime.Format(time.RFC3339))
	case notAfter.Before(notBefore):
		return fmt.Errorf("%w: period of validity ends (%s) before it begins (%s)", ErrIdentity,
			notAfter.UTC().Format(time.RFC3339), notBefore.UTC().Format(time.RFC3339))
	}
	return nil
}

// Verify checks c's fields and the authority's signature. It does not
// look at the time: ValidAt does.
func (c *Cert) Verify(authority ed25519.PublicKey) error {
	switch {
	case c.Role < RoleClient || c.Role > RoleSwitch:
		return fmt.Errorf("%w: unknown role %d", ErrIdentity, uint8(c.Role))
	case len(c.Name) == 0 || len(c.Name) > MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes", ErrIdentity, len(c.Name))
	case len(c.Key) != ed25519.PublicKeySize || len(c.Sig) != ed25519.SignatureSize || len(authority) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: key or signature of the wrong size", ErrIdentity)
	}
	if err := checkPeriod(c.NotBefore, c.NotAfter); err != nil {
		return err
	}
	if !ed25519.Verify(authority, c.certSigned(), c.Sig) {
		return fmt.Errorf("%w: %v %q: not signed by this fabric's authority", ErrIdentity, c.Role, c.Name)
	}
	return nil
}

// ValidAt checks that now lies in c's period of validity, give or take
// ClockSkew. Its error (ErrExpired or ErrNotYetValid) names the role, the
// name and the period. It does not check the signature: Verify does.
func (c *Cert) ValidAt(now time.Time) error {
	switch {
	case now.After(c.NotAfter.Add(ClockSkew)):
		return fmt.Errorf("%w: %v %q: valid until %s, %v ago", ErrExpired, c.Role, c.Name,
			c.NotAfter.UTC().Format(time.RFC3339), now.Sub(c.NotAfter).Truncate(time.Second))
	case now.Before(c.NotBefore.Add(-ClockSkew)):
		return fmt.Errorf("%w: %v %q: valid from %s, in %v", ErrNotYetValid, c.Role, c.Name,
			c.NotBefore.UTC().Format(time.RFC3339), c.NotBefore.Sub(now).Truncate(time.Second))
	}
	return nil
}

// certLen is a certificate's encoded size for a name of n bytes.
func certLen(n int) int { return 2 + n + 16 + ed25519.PublicKeySize + ed25519.SignatureSize }

// appendCert appends c's encoding: role, name length, name, not-before
// and not-after (Unix seconds, 8 bytes each), key, signature.
func appendCert(b []byte, c *Cert) []byte {
	b = append(b, byte(c.Role), byte(len(c.Name)))
	b = append(b, c.Name...)
	b = binary.BigEndian.AppendUint64(b, uint64(c.NotBefore.Unix()))
	b = binary.BigEndian.AppendUint64(b, uint64(c.NotAfter.Unix()))
	b = append(b, c.Key...)
	return append(b, c.Sig...)
}

// parseCert decodes a certificate from the front of b and returns the
// rest.
func parseCert(b []byte) (Cert, []byte, error) {
	if len(b) < 2 || len(b) < certLen(int(b[1])) {
		return Cert{}, nil, fmt.Errorf("%w: truncated certificate", ErrIdentity)
	}
	n := int(b[1])
	c := Cert{Role: Role(b[0]), Name: string(b[2 : 2+n])}
	t := b[2+n:]
	nb, na := binary.BigEndian.Uint64(t), binary.BigEndian.Uint64(t[8:])
	if nb > maxCertUnix || na > maxCertUnix {
		return Cert{}, nil, fmt.Errorf("%w: period of validity after %s", ErrIdentity, MaxCertTime.Format(time.RFC3339))
	}
	c.NotBefore, c.NotAfter = time.Unix(int64(nb), 0).UTC(), time.Unix(int64(na), 0).UTC()
	k := t[16:]
	c.Key = ed25519.PublicKey(k[:ed25519.PublicKeySize:ed25519.PublicKeySize])
	c.Sig = k[ed25519.PublicKeySize : ed25519.PublicKeySize+ed25519.SignatureSize : ed25519.PublicKeySize+ed25519.SignatureSize]
	return c, k[ed25519.PublicKeySize+ed25519.SignatureSize:], nil
}

// Identity is one process's credential: its certificate, the private key
// the certificate names, and the authority's public key to check peers'.
// Policy, if set, is what a Layer of this identity asks about every peer
// (Layer.Policy): the fabric's revocation list, kept current by its
// owner.
type Identity struct {
	Cert      Cert
	Key       ed25519.PrivateKey
	Authority ed25519.PublicKey
	Policy    *Policy
}

// Issue makes an identity of role and name without a time limit: its
// certificate is valid from the Unix epoch to MaxCertTime. It suits
// credentials that live no longer than the processes holding them (tests,
// an in-process demo); credentials handed out are issued by IssueBetween
// with a period of validity. name must be one of role's credential names
// (CheckName): the switch binds its holder by it.
func (a *Authority) Issue(role Role, name string, rand io.Reader) (*Identity, error) {
	return a.IssueBetween(role, name, time.Unix(0, 0).UTC(), MaxCertTime, rand)
}

// IssueBetween makes an identity of role and name whose certificate is
// valid from notBefore to notAfter (both included, whole seconds, between
// 1970 and MaxCertTime): a new Ed25519 key pair from rand
// (crypto/rand.Reader in production) and its certificate.
func (a *Authority) IssueBetween(role Role, name string, notBefore, notAfter time.Time, rand io.Reader) (*Identity, error) {
	if role < RoleClient || role > RoleSwitch || len(name) == 0 || len(name) > MaxNameLen {
		return nil, fmt.Errorf("%w: role %d, name of %d bytes (want 1 to %d)", ErrIdentity, uint8(role), len(name), MaxNameLen)
	}
	if err := CheckName(role, name); err != nil {
		return nil, err
	}
	if err := checkPeriod(notBefore, notAfter); err != nil {
		return nil, err
	}
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, err
	}
	c := Cert{Role: role, Name: name, NotBefore: notBefore.UTC(), NotAfter: notAfter.UTC(), Key: pub}
	c.Sig = ed25519.Sign(a.priv, c.certSigned())
	return &Identity{Cert: c, Key: priv, Authority: a.Public()}, nil
}
