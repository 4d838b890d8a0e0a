package reasm

// Buffer is a Msg with its bytes: fragments land in a buffer given at
// StartInto or later (MoveTo), and until then are kept as copies (a
// message that arrived before its receive was posted), never more than
// the message's length. The zero value has seen no fragment.
type Buffer struct {
	Msg
	buf   []byte // where fragments land; nil while they are kept
	frags []frag
}

// frag is one fragment kept before the message's buffer is known.
type frag struct {
	off  uint32
	data []byte
}

// StartInto fixes the message's length, in bytes, and, if buf is not nil,
// where its fragments land (buf holds at least msgLen bytes).
func (b *Buffer) StartInto(msgLen uint32, buf []byte) {
	*b = Buffer{buf: buf}
	b.Start(msgLen)
}

// Place puts the fragment p found at off in a message of msgLen bytes. It
// refuses (ok false), writing nothing, a fragment of a message not
// started, or one that Check refuses or finds no room for, or that ends
// past the buffer. done reports that the whole message is there.
// O(MaxRanges) plus the copy.
func (b *Buffer) Place(msgLen, off uint32, p []byte) (done, ok bool) {
	fits, room := b.Check(msgLen, off, len(p))
	end := int(off) + len(p)
	if !b.Started() || !fits || !room || (b.buf != nil && end > len(b.buf)) {
		return false, false
	}
	if b.buf != nil {
		copy(b.buf[off:], p)
	} else if len(p) > 0 {
		b.frags = append(b.frags, frag{off: off, data: append([]byte(nil), p...)})
	}
	b.Add(off, uint32(end))
	return b.Complete(), true
}

// Broken reports whether the transport called the message done (it saw
// its last byte) while it is not complete here: a fragment was refused,
// so the message can never complete.
func (b *Buffer) Broken(transportDone bool) bool { return transportDone && !b.Complete() }

// MoveTo lands the fragments kept so far in buf, which holds at least the
// message's length; later fragments land there directly.
func (b *Buffer) MoveTo(buf []byte) {
	for _, f := range b.frags {
		copy(buf[f.off:], f.data)
	}
	b.frags = nil
	b.buf = buf
}

// Bytes returns the buffer the fragments land in (nil while they are
// kept).
func (b *Buffer) Bytes() []byte { return b.buf }

// Kept returns the bytes kept as copies until a buffer is given.
func (b *Buffer) Kept() int {
	n := 0
	for _, f := range b.frags {
		n += len(f.data)
	}
	return n
}
