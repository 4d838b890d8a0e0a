package transport

import (
	"errors"
	"fmt"
	"time"
)

// Errors returned by Send and carried by completions.
var (
	// ErrQueueFull means MaxMessages messages are already queued or in
	// flight; retry after completions drain.
	ErrQueueFull = errors.New("transport: send queue full")
	// ErrPeerQueueFull means the peer already has MaxPeerMessages (or,
	// for an amplification-limited stranger, MaxStrangerMessages)
	// messages queued or in flight. It wraps ErrQueueFull.
	ErrPeerQueueFull = fmt.Errorf("%w: per-peer limit", ErrQueueFull)
	// ErrTooLarge means the message exceeds MaxMessage bytes.
	ErrTooLarge = errors.New("transport: message too large")
	// ErrTooManyPeers means MaxPeers established peers already have state.
	ErrTooManyPeers = errors.New("transport: too many peers")
	// ErrEvicted completes the messages of a stranger peer whose state
	// was evicted to make room for a newer stranger (Config.MaxStrangers).
	ErrEvicted = errors.New("transport: stranger peer evicted")
	// ErrAbandoned completes a message given up with Abandon.
	ErrAbandoned = errors.New("transport: message abandoned")
	// ErrFragment means a SendFragment call was malformed (no id, larger
	// than a packet, or beyond MsgLen).
	ErrFragment = errors.New("transport: bad fragment")
	// ErrPeerDead is wrapped by *PeerError.
	ErrPeerDead = errors.New("transport: peer not responding")
	// ErrSealRequired is matched by the failure of messages to a peer
	// that answered that it takes sealed datagrams only
	// (wire.HandshakeSealRequired) and acknowledged nothing: the notice
	// is not authenticated, so it explains a failure (a *PeerError's, an
	// endpoint's timeout) and never causes one.
	ErrSealRequired = errors.New("transport: " + sealRequiredText)
)

// sealRequiredText is what ErrSealRequired says.
const sealRequiredText = "the peer takes only sealed datagrams: this process needs a credential (--credential, NDMA_CREDENTIAL)"

// PeerError reports that a peer stopped acknowledging for DeadTimeout.
type PeerError struct {
	Peer  PeerID
	Since time.Duration // time without progress
	// SealRequired: the peer's address answered that it takes sealed
	// datagrams only, and acknowledged nothing (Engine.SealRequired).
	SealRequired bool
}

func (e *PeerError) Error() string {
	msg := fmt.Sprintf("transport: peer %v not responding for %v", e.Peer, e.Since)
	if e.SealRequired {
		msg += ": " + sealRequiredText
	}
	return msg
}

// Unwrap makes errors.Is(err, ErrPeerDead) true, and errors.Is(err,
// ErrSealRequired) when SealRequired.
func (e *PeerError) Unwrap() []error {
	if e.SealRequired {
		return []error{ErrPeerDead, ErrSealRequired}
	}
	return []error{ErrPeerDead}
}
