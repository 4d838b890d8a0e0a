package secure

import (
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
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

// Cert binds a role and a name to an Ed25519 public key, signed by the
// fabric's authority.
type Cert struct {
	Role Role
	Name string
	Key  ed25519.PublicKey
	Sig  []byte // the authority's signature of the rest (certSigned)
}

// certSigned is what the authority signs: a label, the role, the name
// and the key.
func (c *Cert) certSigned() []byte {
	b := append([]byte("ndma cert v1\x00"), byte(c.Role), byte(len(c.Name)))
	b = append(b, c.Name...)
	return append(b, c.Key...)
}

// Verify checks c's fields and the authority's signature.
func (c *Cert) Verify(authority ed25519.PublicKey) error {
	switch {
	case c.Role < RoleClient || c.Role > RoleSwitch:
		return fmt.Errorf("%w: unknown role %d", ErrIdentity, uint8(c.Role))
	case len(c.Name) == 0 || len(c.Name) > MaxNameLen:
		return fmt.Errorf("%w: name of %d bytes", ErrIdentity, len(c.Name))
	case len(c.Key) != ed25519.PublicKeySize || len(c.Sig) != ed25519.SignatureSize || len(authority) != ed25519.PublicKeySize:
		return fmt.Errorf("%w: key or signature of the wrong size", ErrIdentity)
	case !ed25519.Verify(authority, c.certSigned(), c.Sig):
		return fmt.Errorf("%w: %v %q: not signed by this fabric's authority", ErrIdentity, c.Role, c.Name)
	}
	return nil
}

// certLen is a certificate's encoded size for a name of n bytes.
func certLen(n int) int { return 2 + n + ed25519.PublicKeySize + ed25519.SignatureSize }

// appendCert appends c's encoding: role, name length, name, key, signature.
func appendCert(b []byte, c *Cert) []byte {
	b = append(b, byte(c.Role), byte(len(c.Name)))
	b = append(b, c.Name...)
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
	k := b[2+n:]
	c.Key = ed25519.PublicKey(k[:ed25519.PublicKeySize:ed25519.PublicKeySize])
	c.Sig = k[ed25519.PublicKeySize : ed25519.PublicKeySize+ed25519.SignatureSize : ed25519.PublicKeySize+ed25519.SignatureSize]
	return c, k[ed25519.PublicKeySize+ed25519.SignatureSize:], nil
}

// Identity is one process's credential: its certificate, the private key
// the certificate names, and the authority's public key to check peers'.
type Identity struct {
	Cert      Cert
	Key       ed25519.PrivateKey
	Authority ed25519.PublicKey
}

// Issue makes an identity of role and name: a new Ed25519 key pair from
// rand (crypto/rand.Reader in production) and its certificate. name must
// be one of role's credential names (CheckName): the switch binds its
// holder by it.
func (a *Authority) Issue(role Role, name string, rand io.Reader) (*Identity, error) {
	pub, priv, err := ed25519.GenerateKey(rand)
	if err != nil {
		return nil, err
	}
	c := Cert{Role: role, Name: name, Key: pub}
	if role < RoleClient || role > RoleSwitch || len(name) == 0 || len(name) > MaxNameLen {
		return nil, fmt.Errorf("%w: role %d, name of %d bytes (want 1 to %d)", ErrIdentity, uint8(role), len(name), MaxNameLen)
	}
	if err := CheckName(role, name); err != nil {
		return nil, err
	}
	c.Sig = ed25519.Sign(a.priv, c.certSigned())
	return &Identity{Cert: c, Key: priv, Authority: a.Public()}, nil
}
