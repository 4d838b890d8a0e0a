package wire

import (
	"cmp"
	"encoding/binary"
	"errors"
	"slices"
)

// Fencing tokens (Chubby's sequencers) checked by the memory nodes.
//
// A process that writes a pool region only while it holds a lock (a key
// space's owner holds its rank) takes a token larger than every earlier
// holder's and raises the fence to it (OpFence) on every memory node
// that holds the region before it writes. Its writes then carry the
// token (FlagFence and a fence trailer), and a memory node refuses with
// StatusFenced any fenced request whose token is below the highest it
// holds for the fence id, or for a fence id it holds no token of: a
// write of an earlier holder that was paused, or held in a queue, past
// the raise cannot land.

// FenceLen is the length of the fence trailer FlagFence announces: a
// 4-byte fence id and an 8-byte token, big-endian.
const FenceLen = 12

// MaxFences bounds the fence ids of one pool region, at the switch and
// at each memory node: a raise of one more is refused with StatusBusy.
// Entries live as long as the region (its grant, at a memory node).
const MaxFences = 1024

// MaxFenceStep bounds a raise: it may take a fence's token up by at
// most this much at a time (from 0 for a fence not raised before), so
// that a crafted raise cannot take a fence to the top of the token space
// and lock every holder out: a holder that counts its tokens in steps
// of 2^32 (a counter over an id, as key space owners do) stays within
// it. A raise past it is refused with StatusBadOperand.
const MaxFenceStep = 1 << 33

// Fence names a fence and a token: requests carrying it are applied only
// while Token is at least the fence's. Token 0 is no fence.
type Fence struct {
	ID    uint32
	Token uint64
}

// ErrFence reports a fence trailer that is too short or carries token 0.
var ErrFence = errors.New("wire: bad fence trailer")

// AppendFence appends f's fence trailer to b.
func AppendFence(b []byte, f Fence) []byte {
	b = binary.BigEndian.AppendUint32(b, f.ID)
	return binary.BigEndian.AppendUint64(b, f.Token)
}

// SplitFence splits the payload of a FlagFence request (without any
// reply-to trailer) into the request's own payload and its fence.
func SplitFence(payload []byte) ([]byte, Fence, error) {
	if len(payload) < FenceLen {
		return nil, Fence{}, ErrFence
	}
	n := len(payload) - FenceLen
	t := payload[n:]
	f := Fence{ID: binary.BigEndian.Uint32(t), Token: binary.BigEndian.Uint64(t[4:])}
	if f.Token == 0 {
		return nil, Fence{}, ErrFence
	}
	return payload[:n], f, nil
}

// Fenceable reports whether requests of op may carry a fence: the ones
// that change memory one datagram at a time, chains (the fence is
// checked at every hop, by the switch and by the hop's memory node), and
// the raise itself.
func (o Opcode) Fenceable() bool {
	switch o {
	case OpWrite, OpCAS, OpFetchAdd, OpVector, OpChain, OpFence:
		return true
	}
	return false
}

// validateFence checks FlagFence against the rest of the header: only on
// pool requests of the ops that take it, with room for the trailer; an
// OpFence always carries it.
func (h *Header) validateFence() error {
	if h.Flags&FlagFence == 0 {
		if h.Op == OpFence && h.Flags&FlagResp == 0 {
			return ErrFlags
		}
		return nil
	}
	n := FenceLen
	if h.Flags&FlagReplyTo != 0 {
		n += ReplyToLen
	}
	if h.Mode != ModePool || h.Flags&FlagResp != 0 || !h.Op.Fenceable() || int(h.Len) < n {
		return ErrFlags
	}
	return nil
}

// FenceList is the fences of table (fence id → token) in increasing id
// order, as control messages carry them; nil if there are none.
func FenceList(table map[uint32]uint64) []Fence {
	if len(table) == 0 {
		return nil
	}
	out := make([]Fence, 0, len(table))
	for id, t := range table {
		out = append(out, Fence{ID: id, Token: t})
	}
	slices.SortFunc(out, func(a, b Fence) int { return cmp.Compare(a.ID, b.ID) })
	return out
}
