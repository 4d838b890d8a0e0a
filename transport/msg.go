package transport

import (
	"time"

	"github.com/ndma/ndma/wire"
)

// packet record states in the send ring.
const (
	recFree uint8 = iota
	recInflight
	recLost // waiting in the retransmit queue
	recAcked
)

type pktRec struct {
	msg    *outMsg
	sentAt time.Time
	off    uint32
	n      uint32
	state  uint8
	retx   uint8
}

type outMsg struct {
	hdr     wire.Header
	payload []byte
	token   uint64
	base    uint32 // offset of payload[0] in the message (fragments)
	next    uint32 // next offset to segment, relative to payload
	unacked int    // packets sent but not acknowledged
	allSent bool
	done    bool
	// stranger: sent to a stranger, counted in Engine.strangerMsgs.
	stranger bool
	next_    *outMsg // queue link
	// shared: the payload stays unchanged until the message completes
	// (SendFragmentShared), so that Poll may send it without a copy;
	// payloadCRC is its wire.PayloadCRC.
	shared     bool
	payloadCRC uint32
	// recs counts the send-ring records that point to the message; once
	// it is done, fully segmented and no record points to it, it goes
	// back to the engine's free list (freeMsg).
	recs int32
}

// MaxFreeMsgs bounds the engine's free list of finished messages.
const MaxFreeMsgs = 1024

// newMsg returns a zeroed message, from the free list when it has one:
// sending allocates nothing per message in steady state.
func (e *Engine) newMsg() *outMsg {
	if n := len(e.freeMsgs); n > 0 {
		m := e.freeMsgs[n-1]
		e.freeMsgs[n-1] = nil
		e.freeMsgs = e.freeMsgs[:n-1]
		return m
	}
	return new(outMsg)
}

// releaseRec zeroes a send-ring record and frees its message when it was
// the last record pointing to a finished message.
func (e *Engine) releaseRec(rec *pktRec) {
	if m := rec.msg; m != nil {
		m.recs--
		if m.recs == 0 && m.done && m.allSent && len(e.freeMsgs) < MaxFreeMsgs {
			*m = outMsg{}
			e.freeMsgs = append(e.freeMsgs, m)
		}
	}
	*rec = pktRec{}
}

func (e *Engine) complete(m *outMsg, p *peer, err error) {
	e.nmsgs--
	p.nmsgs--
	if m.stranger {
		e.strangerMsgs--
	}
	if err != nil {
		e.stats.MessagesFailed++
	} else {
		e.stats.MessagesCompleted++
	}
	e.comps = append(e.comps, Completion{Token: m.token, MsgID: m.hdr.MsgID, Peer: p.id, Err: err})
	m.done = true
	m.payload = nil
}

// getRing returns a send ring: SendWindow records, or a stranger's
// (strangerRing) if small.
func (e *Engine) getRing(small bool) []pktRec {
	pool, size := &e.rings, e.cfg.SendWindow
	if small && strangerRing < size {
		pool, size = &e.smallRings, strangerRing
	}
	if n := len(*pool); n > 0 {
		r := (*pool)[n-1]
		*pool = (*pool)[:n-1]
		return r
	}
	return make([]pktRec, size)
}

// putRing keeps a ring for reuse, up to 64 of each size. A ring
// returned zeroed (an idle peer's: records are zeroed as sndUna passes
// them) is not cleared again: a full ring is SendWindow records, and a
// stream that goes idle after every message returns it each time.
func (e *Engine) putRing(r []pktRec, zeroed bool) {
	pool := &e.rings
	if len(r) < e.cfg.SendWindow {
		pool = &e.smallRings
	}
	if len(*pool) < 64 {
		if !zeroed {
			clear(r)
		}
		*pool = append(*pool, r)
	}
}
