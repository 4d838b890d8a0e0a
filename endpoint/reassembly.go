package endpoint

import (
	"errors"

	"github.com/ndma/ndma/transport/reasm"
	"github.com/ndma/ndma/wire"
)

// ErrBadFragment reports a message whose fragments contradict each other:
// a fragment with another total length than the message's first, one that
// ends past the message or the buffer it lands in, or bytes the message
// already has. Such a fragment is dropped (Stats.FragmentsRefused); a
// message that cannot complete because of it fails with this error.
var ErrBadFragment = errors.New("endpoint: fragment contradicts its message")

// reassembly puts the fragments of one message together: two-sided
// messages, multicast receives, anycast requests served here, and the
// responses of one-sided, control and anycast operations all land through
// it. It is the transport's reasm.Buffer, fed with delivered headers: the
// message's length is fixed by its first fragment; every later fragment
// must agree with it and fit, and the message is complete when every byte
// is there. The transport's MsgDone is only a hint: a message it calls
// done that is not complete here lost a refused fragment (Broken).
//
// Until a buffer is given (MoveTo), the fragments are kept as copies (an
// unexpected message): they never hold more than the message's length.
type reassembly struct{ reasm.Buffer }

// start fixes the message's length and, if buf is not nil, where its
// fragments land (buf holds at least total bytes).
func (r *reassembly) start(total int, buf []byte) { r.StartInto(uint32(total), buf) }

// length returns the message's length in bytes.
func (r *reassembly) length() int { return int(r.Len()) }

// place puts one fragment (header h, payload p) of the message. It
// refuses with ErrBadFragment, writing nothing, a fragment whose MsgLen is
// not the message's, that ends past the message or past the buffer, or
// that holds bytes already placed. done reports that the whole message is
// there.
func (r *reassembly) place(h *wire.Header, p []byte) (done bool, err error) {
	done, ok := r.Place(h.MsgLen, h.Offset, p)
	if !ok {
		return false, ErrBadFragment
	}
	return done, nil
}
