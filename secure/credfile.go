package secure

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A credential file holds one Identity as text, one field per line:
//
//	NDMA CREDENTIAL v2
//	role: memory-node
//	name: "mem0"
//	not-before: 2026-12-06T10:00:00Z
//	not-after: 2027-03-06T10:00:00Z
//	key: <base64 of the 32-byte Ed25519 public key the certificate names>
//	signature: <base64 of the authority's 64-byte signature of the certificate>
//	authority: <base64 of the authority's 32-byte Ed25519 public key>
//	private-key: <base64 of the 32-byte Ed25519 seed of the private key>
//
// The first line is the format's name and version; the fields follow in
// any order, each exactly once; lines that start with '#' and empty lines
// are ignored. The name is a Go-quoted string (any 1 to MaxNameLen bytes);
// not-before and not-after, the certificate's period of validity, are
// RFC 3339 times in whole seconds; base64 is standard with padding
// (RFC 4648). The file holds a private key: it must be readable by its
// owner alone. A file of version 1 (certificates without a period of
// validity) is refused with ErrCredentialVersion.

// credHeader is a credential file's first line; credHeaderV1 that of the
// format before it.
const (
	credHeader   = "NDMA CREDENTIAL v2"
	credHeaderV1 = "NDMA CREDENTIAL v1"
)

// ErrCredentialFile wraps every reason ParseIdentity refuses a credential
// file. One whose certificate does not verify matches ErrIdentity as well.
var ErrCredentialFile = errors.New("secure: bad credential file")

// ErrCredentialVersion is ParseIdentity's error for a credential file of
// an earlier format, which the fabric no longer takes: its holder needs a
// new credential. It matches ErrCredentialFile.
var ErrCredentialVersion = fmt.Errorf("%w: a credential of an earlier format (version 1, without a period of validity): issue a new one (ndma credential issue)", ErrCredentialFile)

// credential file field names.
const (
	fieldRole      = "role"
	fieldName      = "name"
	fieldNotBefore = "not-before"
	fieldNotAfter  = "not-after"
	fieldKey       = "key"
	fieldSig       = "signature"
	fieldAuthority = "authority"
	fieldPrivate   = "private-key"
)

var credFields = [...]string{fieldRole, fieldName, fieldNotBefore, fieldNotAfter, fieldKey, fieldSig, fieldAuthority, fieldPrivate}

// RoleName is r's name in credential files and on command lines:
// "client", "member", "memory-node" or "switch".
func RoleName(r Role) string {
	if r == RoleMemoryNode {
		return "memory-node"
	}
	return r.String()
}

// ParseRole returns the role RoleName(r) names ("memory node" is accepted
// for "memory-node").
func ParseRole(s string) (Role, error) {
	for r := RoleClient; r <= RoleSwitch; r++ {
		if s == RoleName(r) || s == r.String() {
			return r, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown role %q (want client, member, memory-node or switch)", ErrIdentity, s)
}

// Fingerprint names an Ed25519 public key in a form fit to print and
// compare: "SHA256:" and the unpadded base64 of the key's SHA-256 hash, as
// ssh-keygen -l prints a key.
func Fingerprint(pub ed25519.PublicKey) string {
	h := sha256.Sum256(pub)
	return "SHA256:" + base64.RawStdEncoding.EncodeToString(h[:])
}

// String describes id without its private key: role, name and the
// fingerprint of its public key.
func (id Identity) String() string {
	return fmt.Sprintf("%v %q (key %s)", id.Cert.Role, id.Cert.Name, Fingerprint(id.Cert.Key))
}

// Encode writes id as a credential file (see ParseIdentity). The result
// holds the private key: write it to a file only its owner may read. It
// fails on an identity ParseIdentity would refuse: a certificate that does
// not verify against id.Authority, or a private key that is not the
// certificate's.
func (id *Identity) Encode() ([]byte, error) {
	if err := id.check(); err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b64 := base64.StdEncoding.EncodeToString
	fmt.Fprintf(&b, "%s\n", credHeader)
	fmt.Fprintf(&b, "# %v %q of an NDMA fabric: keep this file private (mode 0600)\n", id.Cert.Role, id.Cert.Name)
	fmt.Fprintf(&b, "%s: %s\n", fieldRole, RoleName(id.Cert.Role))
	fmt.Fprintf(&b, "%s: %s\n", fieldName, strconv.Quote(id.Cert.Name))
	fmt.Fprintf(&b, "%s: %s\n", fieldNotBefore, id.Cert.NotBefore.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "%s: %s\n", fieldNotAfter, id.Cert.NotAfter.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "%s: %s\n", fieldKey, b64(id.Cert.Key))
	fmt.Fprintf(&b, "%s: %s\n", fieldSig, b64(id.Cert.Sig))
	fmt.Fprintf(&b, "%s: %s\n", fieldAuthority, b64(id.Authority))
	fmt.Fprintf(&b, "%s: %s\n", fieldPrivate, b64(id.Key.Seed()))
	return b.Bytes(), nil
}

// check verifies id's certificate against its authority and that its
// private key is the certificate's.
func (id *Identity) check() error {
	if err := id.Cert.Verify(id.Authority); err != nil {
		return fmt.Errorf("%w: %w", ErrCredentialFile, err)
	}
	if len(id.Key) != ed25519.PrivateKeySize {
		return fmt.Errorf("%w: private key of %d bytes, want %d", ErrCredentialFile, len(id.Key), ed25519.PrivateKeySize)
	}
	if pub := id.Key.Public().(ed25519.PublicKey); subtle.ConstantTimeCompare(pub, id.Cert.Key) != 1 {
		return fmt.Errorf("%w: the private key is not the one the certificate names", ErrCredentialFile)
	}
	return nil
}

// ParseIdentity reads a credential file written by Encode. It refuses
// (an error wrapping ErrCredentialFile, naming the line and field) a file
// of another format or of an earlier version (ErrCredentialVersion), an
// unknown, repeated or missing field, a malformed value, a certificate the
// authority in the file did not sign (wrapping ErrIdentity too), or a
// private key that is not the certificate's. Its errors never show a
// field's value: no key material, whatever line of the file it is on.
//
// It does not look at the time: a credential outside its period of
// validity is read (Cert.ValidAt tells).
//
// A credential proves its holder to every process that trusts the same
// authority; the caller compares id.Authority with the fabric's own when
// it knows it.
func ParseIdentity(b []byte) (*Identity, error) {
	lines := strings.Split(string(b), "\n")
	var vals [len(credFields)]string
	var seen [len(credFields)]int // line number, or 0
	header := false
	for i, line := range lines {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if line == "" || line[0] == '#' {
			continue
		}
		if !header {
			if line == credHeaderV1 {
				return nil, ErrCredentialVersion
			}
			if line != credHeader {
				return nil, fmt.Errorf("%w: line %d: not an NDMA credential (want %q first)", ErrCredentialFile, n, credHeader)
			}
			header = true
			continue
		}
		name, val, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("%w: line %d: want \"field: value\"", ErrCredentialFile, n)
		}
		f := slices.Index(credFields[:], name)
		switch {
		case f < 0:
			// The text before the colon may be anything, key material
			// of a mangled line too: it is not shown.
			return nil, fmt.Errorf("%w: line %d: unknown field (want one of %s)", ErrCredentialFile, n, strings.Join(credFields[:], ", "))
		case seen[f] != 0:
			return nil, fmt.Errorf("%w: line %d: %s given again (first on line %d)", ErrCredentialFile, n, name, seen[f])
		}
		seen[f] = n
		vals[f] = strings.TrimPrefix(val, " ")
	}
	if !header {
		return nil, fmt.Errorf("%w: empty: not an NDMA credential", ErrCredentialFile)
	}
	for j, cf := range credFields {
		if seen[j] == 0 {
			return nil, fmt.Errorf("%w: no %s field (truncated?)", ErrCredentialFile, cf)
		}
	}
	field := func(name string) (string, int) {
		j := slices.Index(credFields[:], name)
		return vals[j], seen[j]
	}

	var id Identity
	v, n := field(fieldRole)
	role, err := ParseRole(v)
	if err != nil {
		return nil, fmt.Errorf("%w: line %d: role: not a role (want client, member, memory-node or switch)", ErrCredentialFile, n)
	}
	id.Cert.Role = role
	v, n = field(fieldName)
	if id.Cert.Name, err = strconv.Unquote(v); err != nil || !strings.HasPrefix(v, `"`) {
		return nil, fmt.Errorf("%w: line %d: name: want a double-quoted string", ErrCredentialFile, n)
	}
	for _, t := range []struct {
		name string
		to   *time.Time
	}{{fieldNotBefore, &id.Cert.NotBefore}, {fieldNotAfter, &id.Cert.NotAfter}} {
		v, n := field(t.name)
		if *t.to, err = parseCertTime(v); err != nil {
			return nil, fmt.Errorf("%w: line %d: %s: %w", ErrCredentialFile, n, t.name, err)
		}
	}
	decode := func(name string, size int) ([]byte, error) {
		v, n := field(name)
		b, err := base64.StdEncoding.Strict().DecodeString(v)
		if err != nil {
			// The decoder's error names an offset, never the data.
			return nil, fmt.Errorf("%w: line %d: %s: bad base64: %v", ErrCredentialFile, n, name, err)
		}
		if len(b) != size {
			return nil, fmt.Errorf("%w: line %d: %s: %d bytes, want %d", ErrCredentialFile, n, name, len(b), size)
		}
		return b, nil
	}
	var seed []byte
	for _, d := range []struct {
		name string
		size int
		to   *[]byte
	}{
		{fieldKey, ed25519.PublicKeySize, (*[]byte)(&id.Cert.Key)},
		{fieldSig, ed25519.SignatureSize, &id.Cert.Sig},
		{fieldAuthority, ed25519.PublicKeySize, (*[]byte)(&id.Authority)},
		{fieldPrivate, ed25519.SeedSize, &seed},
	} {
		if *d.to, err = decode(d.name, d.size); err != nil {
			return nil, err
		}
	}
	id.Key = ed25519.NewKeyFromSeed(seed)
	clear(seed)
	if err := id.check(); err != nil {
		return nil, err
	}
	return &id, nil
}

// errCertTime is parseCertTime's error: it does not show the text.
var errCertTime = errors.New("want an RFC 3339 time in whole seconds, such as 2026-01-02T15:04:05Z")

// parseCertTime reads a time of a certificate's period of validity as
// Encode writes it.
func parseCertTime(v string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, v)
	if err != nil || t.Nanosecond() != 0 {
		return time.Time{}, errCertTime
	}
	return t.UTC(), nil
}
