package transport

import (
	"time"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// validated records that the peer proved it receives at its address. If
// its data was answered with challenges so far, a real ACK goes out now.
func (p *peer) validated() {
	p.proven = true
	p.e.promote(p)
	if p.rcvInit {
		p.ackPending, p.ackAt = true, 0
	}
}

// requestReset answers a datagram that would restart the receive window
// at base with a challenge (RFC 5961's challenge ACK, in this protocol's
// form: an ACK with FlagSyn whose header PSN is a fresh nonce and whose
// cumulative point is base); the sender echoes the nonce (buildEcho) and
// only then is the window restarted (onResetEcho). At most one challenge
// goes out per RTO, so a flood of forged restarts gets no more answers
// than the real sender needs; under such a flood a sender that really
// restarted gets through once its resend is the first request after a
// timeout.
func (p *peer) requestReset(now time.Time, base uint32) {
	p.e.stats.ResetChallenges++
	if p.resetPending && now.Sub(p.lastChallenge) < p.rto {
		// One challenge in flight: the base it asks about stands until
		// it is echoed or a timeout has passed (the real sender resends).
		return
	}
	p.resetPending, p.resetBase = true, base
	p.resetNonce = p.e.rng.Uint32() | 1
	p.resetChallenge, p.lastChallenge = true, now
	p.e.activate(p)
}

// onResetEcho takes an ACK that may echo the reset challenge: if it does,
// the window restarts at the requested base. It reports whether it did.
func (p *peer) onResetEcho(a *wire.Ack) bool {
	if !p.resetPending || a.Cum != p.resetNonce || a.NBlocks != 0 {
		return false
	}
	p.resetPending = false
	p.resetReceiver(p.resetBase)
	p.e.stats.Resets++
	return true
}

// buildResetChallenge encodes the challenge requestReset asked for.
func (p *peer) buildResetChallenge(now time.Time, buf []byte) netio.Datagram {
	p.resetChallenge = false
	a := wire.Ack{Cum: p.resetBase, Window: uint32(p.e.cfg.RecvWindow)}
	h := wire.Header{
		Version: wire.Version,
		Op:      wire.OpAck,
		Flags:   wire.FlagSyn,
		Mode:    p.id.Mode,
		Group:   p.id.Group,
		Src:     p.e.local(p.id.Group),
		Dst:     p.id.Member,
		PSN:     p.resetNonce,
		TS:      uint64(now.UnixNano()),
	}
	p.e.stats.AcksSent++
	return netio.Datagram{Addr: p.id.Addr, Buf: wire.PutAckPacket(buf, &h, &a), Control: true}
}

// buildEcho encodes the answer to a peer's challenge (see buildAck): an
// ACK whose cumulative point is the challenge, the peer's own oldest
// unacknowledged PSN, so it acknowledges nothing the peer does not know
// is acknowledged.
func (p *peer) buildEcho(now time.Time, buf []byte, limited bool) (d netio.Datagram, ok bool) {
	p.echoPending = false
	if limited && p.credit < wire.HeaderLen+wire.AckFixedLen {
		p.e.stats.AmplificationLimited++
		return d, false
	}
	a := wire.Ack{Cum: p.challenge, Window: p.window()}
	h := wire.Header{
		Version: wire.Version,
		Op:      wire.OpAck,
		Mode:    p.id.Mode,
		Group:   p.id.Group,
		Src:     p.e.local(p.id.Group),
		Dst:     p.id.Member,
		TS:      uint64(now.UnixNano()),
	}
	b := wire.PutAckPacket(buf, &h, &a)
	p.e.stats.AcksSent++
	if limited {
		p.credit -= int64(len(b))
	}
	return netio.Datagram{Addr: p.id.Addr, Buf: b, Control: true}, true
}
