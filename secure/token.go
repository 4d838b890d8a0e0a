package secure

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
)

// TokenBytes is the number of random bytes in a token NewToken draws.
const TokenBytes = 32

// NewToken draws a fabric token: TokenBytes bytes from crypto/rand, in
// lowercase hex (2*TokenBytes characters), the form a token file's first
// line and --token hold. The token is the hex text itself: the switch and
// endpoints use its characters as the HMAC key of control messages
// (AppendCtrl, ParseCtrl).
func NewToken() []byte {
	var b [TokenBytes]byte
	rand.Read(b[:]) // never fails (crypto/rand.Read crashes the program instead)
	return hex.AppendEncode(nil, b[:])
}

// ErrNoToken is matched (errors.Is) by the error of every configuration
// that would run or talk to a forwarding node without a fabric token and
// without asking for Insecure: the switch's Config (package fabric), and
// the daemons' and endpoints' options built on it.
var ErrNoToken = errors.New("no fabric token: give one, or ask for insecure to run without authentication")

// CheckToken is the rule every configuration of the fabric applies to its
// token: a token, or insecure explicitly, not both. The error is
// ErrNoToken, or says that both were given; the caller names its field.
func CheckToken(token []byte, insecure bool) error {
	switch {
	case len(token) == 0 && !insecure:
		return ErrNoToken
	case len(token) > 0 && insecure:
		return errors.New("a token together with insecure: a token turns authentication on; drop one of them")
	}
	return nil
}
