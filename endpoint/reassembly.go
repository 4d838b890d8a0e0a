package endpoint

import (
	"errors"

	"github.com/ndma/ndma/wire"
)

// ErrBadFragment reports a message whose fragments contradict each other:
// a fragment with another total length than the message's first, one that
// ends past the message or the buffer it lands in, or more bytes than the
// message holds. Such a fragment is dropped (Stats.FragmentsRefused); a
// message that cannot complete because of it fails with this error.
var ErrBadFragment = errors.New("endpoint: fragment contradicts its message")

// reassembly puts the fragments of one message together: two-sided
// messages, multicast receives, anycast requests served here, and the
// responses of one-sided, control and anycast operations all land through
// it. The message's length is fixed by its first fragment; every later
// fragment must agree with it and fit, and the message is complete when
// exactly that many bytes were placed. The transport's MsgDone is only a
// hint: a message it calls done that is not complete here lost a refused
// fragment (see broken).
//
// Until a buffer is given (moveTo), the fragments are kept as copies (an
// unexpected message): they never hold more than the message's length.
type reassembly struct {
	open  bool   // the first fragment arrived: total is fixed
	total int    // the message's length
	got   int    // bytes placed
	buf   []byte // where fragments land; nil while they are kept
	frags []unexpFrag
}

// unexpFrag is one fragment kept before the message's buffer is known.
type unexpFrag struct {
	off  int
	data []byte
}

// start fixes the message's length and, if buf is not nil, where its
// fragments land (buf holds at least total bytes).
func (r *reassembly) start(total int, buf []byte) {
	*r = reassembly{open: true, total: total, buf: buf}
}

// place puts one fragment (header h, payload p) of the message. It
// refuses, writing nothing, a fragment whose MsgLen is not the message's,
// that ends past the message or past the buffer, or that would make the
// bytes placed exceed the message's length. done reports that the whole
// message is there.
func (r *reassembly) place(h *wire.Header, p []byte) (done bool, err error) {
	off, n := int(h.Offset), len(p)
	if !r.open || int(h.MsgLen) != r.total || off+n > r.total || r.got+n > r.total ||
		(r.buf != nil && off+n > len(r.buf)) {
		return false, ErrBadFragment
	}
	if r.buf != nil {
		copy(r.buf[off:], p)
	} else if n > 0 {
		r.frags = append(r.frags, unexpFrag{off: off, data: append([]byte(nil), p...)})
	}
	r.got += n
	return r.got == r.total, nil
}

// complete reports whether every byte of the message was placed.
func (r *reassembly) complete() bool { return r.open && r.got == r.total }

// broken reports whether the transport called the message done (it saw
// its last byte) while it is not complete here: a fragment was refused,
// so the message can never complete.
func (r *reassembly) broken(transportDone bool) bool { return transportDone && !r.complete() }

// moveTo lands the fragments kept so far in buf, which holds at least
// total bytes; later fragments land there directly.
func (r *reassembly) moveTo(buf []byte) {
	for _, f := range r.frags {
		copy(buf[f.off:], f.data)
	}
	r.frags = nil
	r.buf = buf
}
