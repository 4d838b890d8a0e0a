package reasm

// MaxRanges bounds the disjoint byte ranges tracked per message. In-order
// arrival keeps one; a fragment that would open one more than this does
// not fit (Check's room is false): the transport drops it unacknowledged,
// and the sender's retransmissions of the gaps merge the ranges back.
const MaxRanges = 8

// span is a received byte range [start, end) of a message.
type span struct{ start, end uint32 }

// Msg is the reassembly state of one message: its length, fixed by its
// first fragment (Start), and the byte ranges received so far, sorted,
// disjoint and not adjacent. The zero value has seen no fragment.
type Msg struct {
	msgLen  uint32
	n       uint8
	started bool
	spans   [MaxRanges]span
}

// Start fixes the message's length, in bytes, and forgets any ranges.
func (m *Msg) Start(msgLen uint32) { *m = Msg{msgLen: msgLen, started: true} }

// Started reports whether Start fixed the message's length.
func (m *Msg) Started() bool { return m.started }

// Len returns the message's length in bytes (0 before Start).
func (m *Msg) Len() uint32 { return m.msgLen }

// Check reports whether the n bytes at off of a message of msgLen bytes
// agree with m (ok): they lie within the message, msgLen is its length
// (once started), and they overlap no byte already received (no bytes
// always agree). room reports
// whether Add can record them without exceeding MaxRanges. O(MaxRanges).
func (m *Msg) Check(msgLen, off uint32, n int) (ok, room bool) {
	end := uint64(off) + uint64(n)
	if n < 0 || end > uint64(msgLen) || (m.started && msgLen != m.msgLen) {
		return false, false
	}
	s, e := off, uint32(end)
	if s == e {
		return true, true // nothing to record
	}
	room = int(m.n) < MaxRanges
	for _, sp := range m.spans[:m.n] {
		if s < sp.end && sp.start < e {
			return false, false
		}
		if sp.end == s || sp.start == e {
			room = true
		}
	}
	return true, room
}

// Add records the bytes [s, e), which Check accepted with room, merging
// them with their neighbours. An empty range records nothing.
func (m *Msg) Add(s, e uint32) {
	if s == e {
		return
	}
	n := int(m.n)
	i := 0
	for i < n && m.spans[i].start < s {
		i++
	}
	switch {
	case i > 0 && m.spans[i-1].end == s:
		m.spans[i-1].end = e
		if i < n && m.spans[i].start == e {
			m.spans[i-1].end = m.spans[i].end
			copy(m.spans[i:n-1], m.spans[i+1:n])
			m.n--
		}
	case i < n && m.spans[i].start == e:
		m.spans[i].start = s
	default:
		copy(m.spans[i+1:n+1], m.spans[i:n])
		m.spans[i] = span{s, e}
		m.n++
	}
}

// Complete reports whether every byte of the started message was received.
func (m *Msg) Complete() bool {
	return m.started && (m.msgLen == 0 || m.n == 1 && m.spans[0] == span{0, m.msgLen})
}
