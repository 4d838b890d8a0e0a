package secure

import (
	"crypto/hkdf"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
)

// Role is what a process is to the fabric. Each role's credentials are
// derived separately from the fabric secret, so a credential of one role
// (or of one name) gives nothing of another's: a client cannot pose as a
// memory node or as the switch.
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

// MaxNameLen bounds a credential's name, in bytes.
const MaxNameLen = 64

// ErrCredential wraps a credential that cannot be issued (an empty
// secret, an unknown role, a name too long or empty).
var ErrCredential = errors.New("secure: bad credential")

// Credential is the secret of one identity (a role and a name, e.g. a
// memory node's host name or a job's name and rank): the fabric's
// administrator issues it from the fabric secret, which only the switch
// and the administrator hold. Whoever holds it can prove the identity
// (Proof); whoever holds the fabric secret can check the proof
// (VerifyProof) without any table of credentials.
type Credential struct {
	Role   Role
	Name   string
	Secret [32]byte
}

// Issue derives the credential of (role, name) from the fabric secret
// with HKDF-SHA256.
func Issue(fabricSecret []byte, role Role, name string) (Credential, error) {
	switch {
	case len(fabricSecret) < 16:
		return Credential{}, fmt.Errorf("%w: fabric secret of %d bytes, want at least 16", ErrCredential, len(fabricSecret))
	case role < RoleClient || role > RoleSwitch:
		return Credential{}, fmt.Errorf("%w: unknown role %d", ErrCredential, uint8(role))
	case len(name) == 0 || len(name) > MaxNameLen:
		return Credential{}, fmt.Errorf("%w: name of %d bytes, want 1 to %d", ErrCredential, len(name), MaxNameLen)
	}
	b, err := hkdf.Key(sha256.New, fabricSecret, []byte("ndma credential v1"), string([]byte{byte(role)})+name, 32)
	if err != nil {
		return Credential{}, err
	}
	c := Credential{Role: role, Name: name}
	copy(c.Secret[:], b)
	return c, nil
}

// ProofLen is the length of a proof, in bytes.
const ProofLen = sha256.Size

// Proof proves the credential over challenge (a nonce of the verifier's,
// with whatever else the proof must bind: addresses, the handshake's
// messages): HMAC-SHA256 under the credential's secret of a label, the
// role, the name and the challenge.
func (c *Credential) Proof(challenge []byte) [ProofLen]byte {
	return proof(c.Secret[:], c.Role, c.Name, challenge)
}

func proof(secret []byte, role Role, name string, challenge []byte) [ProofLen]byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("ndma proof v1"))
	m.Write([]byte{byte(role), byte(len(name))})
	m.Write([]byte(name))
	m.Write(challenge)
	var out [ProofLen]byte
	m.Sum(out[:0])
	return out
}

// VerifyProof reports whether p proves the credential of (role, name)
// over challenge, deriving it from the fabric secret. The comparison is
// constant-time.
func VerifyProof(fabricSecret []byte, role Role, name string, challenge []byte, p [ProofLen]byte) bool {
	c, err := Issue(fabricSecret, role, name)
	if err != nil {
		return false
	}
	want := proof(c.Secret[:], role, name, challenge)
	return hmac.Equal(want[:], p[:])
}
