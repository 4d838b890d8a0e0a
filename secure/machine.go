package secure

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
)

// Wrap returns m behind l: every datagram m is given is opened by l first
// (what l drops, or keeps for its handshakes, m never sees), and every
// datagram m sends is sealed by l, with l's handshake messages and
// retransmissions going out beside them. The result is a loop.Machine (a
// loop.Streamer, which a loop.Driver writes in parts of FlushChunk
// datagrams as they are sealed) whose deadline is the earlier of m's and
// l's. m's datagrams must not have a Tail: the layer seals Buf alone. m
// and l must not be used otherwise while the wrapper is; l's Stats and
// Peer may be read between its calls.
func Wrap(m loop.Machine, l *Layer) loop.Machine {
	return &sealed{m: m, l: l}
}

// sealed is the machine Wrap returns.
type sealed struct {
	m     loop.Machine
	l     *Layer
	plain []netio.Datagram // m's output, reused
	taken []netio.Datagram // Poll's sealed datagrams, recycled at the next Poll
}

// Receive opens d and hands its plain form, if any, to the machine.
func (s *sealed) Receive(now time.Time, d netio.Datagram) {
	if d.Buf = s.l.Receive(now, d.Addr, d.Buf); d.Buf != nil {
		s.m.Receive(now, d)
	}
}

// Poll polls the machine, seals what it gives and runs the layer's timers
// when due; it returns the sealed datagrams and the layer's handshake
// messages, valid until the next Poll.
func (s *sealed) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	s.l.Recycle(s.taken)
	clear(s.taken)
	start := len(out)
	plain, next := s.m.Poll(now, s.plain[:0])
	for _, d := range plain {
		_ = s.l.send(now, d.Addr, d.Buf, d.Control)
	}
	clear(plain)
	s.plain = plain[:0]
	if dl := s.l.Deadline(); !dl.IsZero() && !now.Before(dl) {
		s.l.Tick(now)
	}
	out = s.l.Take(out)
	s.taken = append(s.taken[:0], out[start:]...)
	return out, loop.Earliest(next, s.l.Deadline())
}

// PollWrite is Poll for a loop.Driver: the sealed datagrams go to write
// FlushChunk at a time, and their buffers are the layer's again after.
func (s *sealed) PollWrite(now time.Time, scratch []netio.Datagram, write func([]netio.Datagram)) ([]netio.Datagram, time.Time) {
	s.l.Recycle(s.taken)
	clear(s.taken)
	s.taken = s.taken[:0]
	plain, next := s.m.Poll(now, s.plain[:0])
	scratch, dl := s.l.Flush(now, plain, scratch, write)
	clear(plain)
	s.plain = plain[:0]
	return scratch, loop.Earliest(next, dl)
}
