package secure

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	stdhash "hash"
	"sync"

	"github.com/ndma/ndma/wire/ctrl"
)

// Control messages (package wire/ctrl) end in a tag: HMAC-SHA256 keyed with
// the fabric token over every byte before it, truncated to CtrlTagLen
// bytes. AppendCtrl appends it, ParseCtrl checks it before it decodes.

// CtrlTagLen is the length of a control message's tag, in bytes.
const CtrlTagLen = 16

// ErrCtrlAuth means the tag does not match the message under the fabric
// token: the switch answers it with wire.StatusAuth.
var ErrCtrlAuth = errors.New("fabric: control message authentication failed")

// AppendCtrl encodes m (ctrl.Append), appends
// HMAC-SHA256(token, encoded)[:CtrlTagLen] and returns the extended slice.
// A nil or empty token is allowed here (the tag is then computed with an
// empty key): the configurations above it (the switch's Config, the
// endpoint's FabricOptions) refuse one unless Insecure is set
// (CheckToken). As with any HMAC key, a token shorter than 64 bytes is
// padded with zero bytes, so tokens that differ only in trailing zero
// bytes are the same key.
//
// If a field is out of range it returns dst unchanged and ctrl.Append's
// error, which wraps ctrl.ErrMalformed: everything AppendCtrl accepts,
// ParseCtrl accepts.
func AppendCtrl(dst []byte, m *ctrl.Msg, token []byte) ([]byte, error) {
	start := len(dst)
	b, err := ctrl.Append(dst, m)
	if err != nil {
		return dst, err
	}
	mac := getCtrlMAC(token)
	b = append(b, mac.tag(b[start:])...)
	ctrlMACPool.Put(mac)
	return b, nil
}

// ParseCtrl verifies the tag of control message b under token and decodes
// it into m (ctrl.Parse). It checks the tag first, in constant time, over
// everything but the last CtrlTagLen bytes, so any change to the bytes is
// ErrCtrlAuth; a message shorter than the tag, or one whose fields do not
// decode, is an error wrapping ctrl.ErrMalformed.
//
// As with ctrl.Parse, m's slices and names are reused, so parsing into the
// same ctrl.Msg repeatedly does not allocate once the MAC is warm; on
// error m's contents are unspecified. ParseCtrl never panics and does not
// retain b.
func ParseCtrl(b []byte, m *ctrl.Msg, token []byte) error {
	if len(b) < CtrlTagLen {
		return fmt.Errorf("%w: %d bytes, shorter than the tag", ctrl.ErrMalformed, len(b))
	}
	body, tag := b[:len(b)-CtrlTagLen], b[len(b)-CtrlTagLen:]
	mac := getCtrlMAC(token)
	ok := hmac.Equal(mac.tag(body), tag)
	ctrlMACPool.Put(mac)
	if !ok {
		return ErrCtrlAuth
	}
	return ctrl.Parse(body, m)
}

// ctrlMAC is an HMAC-SHA256 keyed with one token, kept in ctrlMACPool so
// that computing a tag does not allocate in the steady state.
type ctrlMAC struct {
	key []byte
	h   stdhash.Hash
	sum [sha256.Size]byte
}

var ctrlMACPool sync.Pool

// getCtrlMAC returns a reset HMAC keyed with token; the caller puts it back
// in ctrlMACPool when done.
func getCtrlMAC(token []byte) *ctrlMAC {
	if c, ok := ctrlMACPool.Get().(*ctrlMAC); ok && bytes.Equal(c.key, token) {
		c.h.Reset()
		return c
	}
	return &ctrlMAC{key: bytes.Clone(token), h: hmac.New(sha256.New, token)}
}

// tag returns the truncated HMAC of msg; it is valid until c is reused.
func (c *ctrlMAC) tag(msg []byte) []byte {
	c.h.Write(msg)
	return c.h.Sum(c.sum[:0])[:CtrlTagLen]
}
