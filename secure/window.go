package secure

// Window is an anti-replay window over 64-bit sequence numbers of which
// packets carry only the low 32 bits (IPsec ESP's extended sequence
// numbers, RFC 4303 appendix A): it infers the high bits from the highest
// sequence number accepted, and accepts each sequence number at most once,
// none more than WindowSize behind the highest. Check and Accept are O(1)
// (RFC 6479's block ring). The zero value is ready: it expects sequence
// numbers from 1.
type Window struct {
	top    uint64                  // highest sequence number accepted (0: none)
	blocks [WindowSize / 64]uint64 // bit per sequence number, ring of blocks
}

// WindowSize is how far behind the highest sequence number accepted a
// packet may arrive (reordering tolerated), in packets.
const WindowSize = 4096

const windowBlocks = WindowSize / 64

// Check infers the full sequence number of a packet carrying low and
// reports whether it may be accepted: not zero, not accepted before, not
// behind the window. It changes nothing: call Accept once the packet is
// authenticated, so forged packets cannot move the window.
func (w *Window) Check(low uint32) (uint64, bool) {
	seq := w.infer(low)
	switch {
	case seq == 0:
		return 0, false
	case seq > w.top:
		return seq, true
	case w.top-seq >= WindowSize-64:
		// Behind the window (the ring keeps WindowSize bits, the
		// block being filled among them).
		return seq, false
	}
	return seq, w.blocks[(seq/64)%windowBlocks]&(1<<(seq%64)) == 0
}

// infer returns the 64-bit sequence number whose low 32 bits are low,
// closest to the window: RFC 4303 A2.2 (a packet from just before a wrap
// of the low bits, or just after).
func (w *Window) infer(low uint32) uint64 {
	th, tl := w.top>>32, uint32(w.top)
	const win = WindowSize
	if tl >= win-1 {
		if low >= tl-(win-1) {
			return th<<32 | uint64(low)
		}
		return (th+1)<<32 | uint64(low)
	}
	if low >= tl-(win-1) { // wrapped subtraction: low lies before tl, in the previous epoch
		if th == 0 {
			return uint64(low) // no previous epoch: 0 is refused, others lie ahead
		}
		return (th-1)<<32 | uint64(low)
	}
	return th<<32 | uint64(low)
}

// Accept records seq (checked by Check, then authenticated).
func (w *Window) Accept(seq uint64) {
	if seq > w.top {
		// Clear the blocks the window moves over.
		from, to := w.top/64+1, seq/64
		if to-from+1 >= windowBlocks || w.top == 0 {
			clear(w.blocks[:])
		} else {
			for b := from; b <= to; b++ {
				w.blocks[b%windowBlocks] = 0
			}
		}
		w.top = seq
	}
	w.blocks[(seq/64)%windowBlocks] |= 1 << (seq % 64)
}

// Top is the highest sequence number accepted (0: none).
func (w *Window) Top() uint64 { return w.top }
