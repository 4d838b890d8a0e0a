package secure

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"
)

// An authority secret file holds the fabric secret credentials are issued
// under (NewAuthority), on its first line, after a label that tells it
// from a fabric token:
//
//	ndma-authority-v1:<64 hexadecimal digits>
//	# the authority secret of an NDMA fabric: ...
//
// A fabric token is held by every process of the fabric; an authority
// derived from it would let each of them issue credentials of any role.
// A token file has no label, so it is never taken for an authority
// secret, and the label tells whoever reads a token to refuse an
// authority secret given in its place.

// AuthoritySecretPrefix begins the first line of an authority secret file.
const AuthoritySecretPrefix = "ndma-authority-v1:"

// ErrNotAuthoritySecret: a file given as the authority secret that is not
// one (a fabric token, say). It matches ErrIdentity.
var ErrNotAuthoritySecret = fmt.Errorf("%w: not an authority secret", ErrIdentity)

// authoritySecretBytes is how many random bytes NewAuthoritySecret draws.
const authoritySecretBytes = 32

// NewAuthoritySecret draws a fabric secret from rand (crypto/rand.Reader
// in production) and returns it as an authority secret file.
func NewAuthoritySecret(rand io.Reader) ([]byte, error) {
	var s [authoritySecretBytes]byte
	if _, err := io.ReadFull(rand, s[:]); err != nil {
		return nil, err
	}
	b := append([]byte(AuthoritySecretPrefix), hex.AppendEncode(nil, s[:])...)
	clear(s[:])
	b = append(b, "\n# the authority secret of an NDMA fabric: ndma credential issue --secret-file reads it;\n"+
		"# keep it with whoever issues credentials (mode 0600), never give it to a process\n"...)
	return b, nil
}

// IsAuthoritySecret reports whether line, the first line of a file, is
// that of an authority secret file.
func IsAuthoritySecret(line []byte) bool {
	return bytes.HasPrefix(line, []byte(AuthoritySecretPrefix))
}

// ParseAuthoritySecret derives the fabric's authority from an authority
// secret file (NewAuthoritySecret): the text of its first line after
// AuthoritySecretPrefix is the fabric secret. A file without the label (a
// fabric token) is refused with ErrNotAuthoritySecret. Its errors never
// show the file's text.
func ParseAuthoritySecret(b []byte) (*Authority, error) {
	line, _, _ := bytes.Cut(b, []byte("\n"))
	line = bytes.TrimSuffix(line, []byte("\r"))
	secret, ok := bytes.CutPrefix(line, []byte(AuthoritySecretPrefix))
	if !ok {
		return nil, fmt.Errorf("%w: its first line does not begin with %q (a fabric token, or a secret of an earlier version)", ErrNotAuthoritySecret, AuthoritySecretPrefix)
	}
	if len(secret) < MinSecretLen || bytes.ContainsAny(secret, " \t") {
		return nil, fmt.Errorf("%w: the secret after %q is %d bytes, want at least %d without spaces", ErrNotAuthoritySecret, AuthoritySecretPrefix, len(secret), MinSecretLen)
	}
	return NewAuthority(secret)
}
