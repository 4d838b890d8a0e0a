package transport

import (
	"errors"
	"fmt"
	"time"

	"github.com/ndma/ndma/wire"
)

// Config tunes an Engine. Every field's zero value selects the documented
// default, so Config{} is a working configuration.
type Config struct {
	// Local is this endpoint's member id, written as Src in every packet.
	Local uint16
	// MTU is the largest datagram the engine emits, in bytes, header
	// included. Zero means 9000. The payload per packet is MTU-96 rounded
	// down to a multiple of 8 (so vector elements never straddle packets).
	MTU int
	// SendWindow bounds the packets in flight to one peer (sent, not yet
	// acknowledged). Zero means 1024. Must be a power of two.
	SendWindow int
	// RecvWindow is the receive window per peer in packets: PSNs at or
	// beyond the cumulative point plus RecvWindow are dropped. Zero means
	// 1024. Must be a power of two.
	RecvWindow int
	// MaxMessages bounds the outgoing messages queued or in flight across
	// all peers; Send fails with ErrQueueFull beyond it. Zero means 8192.
	MaxMessages int
	// MaxPartial bounds the partially received messages tracked per peer;
	// a packet that would start one more is dropped (the sender resends
	// it). Zero means 256.
	MaxPartial int
	// MaxPeers bounds the established peers: those the local side
	// created (Send, SendFragment) and those whose address is validated
	// (see Engine.Validated). A Send that would create one more fails with
	// ErrTooManyPeers; established peers are never evicted, only swept
	// when idle or dropped when dead. Zero means 65536.
	MaxPeers int
	// MaxStrangers bounds the stranger peers: state created by incoming
	// data from an address not validated yet (or while MaxPeers are
	// established). A new stranger beyond it evicts the least recently
	// active one, failing its messages with ErrEvicted; strangers never
	// push out established peers. Zero means 1024.
	MaxStrangers int
	// MaxPeerMessages bounds the outgoing messages queued or in flight to
	// one peer; Send fails with ErrPeerQueueFull (which wraps
	// ErrQueueFull) beyond it, so that one peer that never acknowledges
	// cannot take all of MaxMessages. Zero means 1024.
	MaxPeerMessages int
	// MaxStrangerMessages is MaxPeerMessages for a stranger whose address
	// has not shown that it receives (an amplification-limited peer).
	// Zero means 64.
	MaxStrangerMessages int
	// IdleTimeout is how long a peer with nothing queued or in flight and
	// no traffic either way keeps its state; then it is swept (a partial
	// message idle that long is dead: its sender would have resent it
	// within DeadTimeout). Zero means the larger of 30s and twice
	// DeadTimeout; it must not be below DeadTimeout.
	IdleTimeout time.Duration
	// MaxBurst bounds the packets one Poll returns. Zero means 256.
	MaxBurst int
	// InitialRTO is the retransmission timeout before any RTT sample.
	// Zero means 20ms.
	InitialRTO time.Duration
	// MinRTO and MaxRTO clamp the RFC 6298 timeout. Zero means 2ms and 200ms (a datacenter
	// fabric, not the RFC's 60s: DeadTimeout, not the backoff, decides
	// when a peer is gone).
	MinRTO, MaxRTO time.Duration
	// DeadTimeout is how long a peer may leave outstanding data without
	// acknowledging anything before it is declared dead and its messages
	// fail with a *PeerError. Zero means 5s.
	DeadTimeout time.Duration
	// TargetDelay is the queueing delay, above the lowest RTT seen, that the
	// delay-based congestion control aims for. Zero means 500µs.
	TargetDelay time.Duration
	// InitialCwnd, MinCwnd and MaxCwnd bound the congestion window in
	// packets. Zero means 16, 1 and SendWindow.
	InitialCwnd, MinCwnd, MaxCwnd float64
	// GroupModes accepts multicast, aggregation and anycast streams (from
	// a forwarding node). Zero means unicast only: other modes are dropped
	// and counted as unexpected, as a memory node wants.
	GroupModes bool
	// Verified says a security layer below the engine authenticates every
	// datagram (package secure: an AEAD tag covers header and payload), so
	// the engine neither checksums what it sends (the layer checksums the
	// sealed datagram) nor checks the CRC32C of what it receives. Set it
	// only when every datagram Receive sees came out of such a layer.
	Verified bool
	// ImmediateAcks sends every ACK at once. By default the ACK of a
	// lone one-packet response on the point-to-point group or an anycast
	// stream (a READ's data, say) waits up to MaxAckDelay for the next
	// request to ride on (wire.FlagAck), as an ACK due when data goes out
	// to the same peer always does, and on an anycast stream so does the
	// ACK of a lone one-packet request, for its reply: a request and its
	// response then cost two datagrams, not four. Every sender adds MaxAckDelay to its retransmission
	// timeout on that group, so a peer that sets ImmediateAcks still
	// interoperates.
	ImmediateAcks bool
	// Seed seeds initial sequence numbers and message ids. Zero draws a
	// random seed; tests set it for determinism.
	Seed uint64
}

// MinMTU and MaxMTU bound Config.MTU, in bytes: a header and 64 bytes of
// payload, and the largest UDP datagram over IPv4.
const (
	MinMTU = wire.HeaderLen + 64
	MaxMTU = 65507
)

// MaxWindow is the largest SendWindow and RecvWindow a Config may set.
const MaxWindow = 1 << 16

// StaleSpan is how far behind a receiver's cumulative point a data
// packet's AckBase may lie and still belong to the stream the receiver
// tracks: the sender's AckBase trails what the receiver acknowledged by at
// most the sender's send window (MaxWindow), and a sender answers a
// challenge only for a point at most a send window below its own. A
// packet further behind is either one the network held for a long time
// (its sender does not answer the challenge, as the point is more than a
// window below anything it would echo) or the sender's real stream,
// behind a receive window that a forged datagram started: the challenge
// lets that stream restart the window.
const StaleSpan = 2 * MaxWindow

// Defaults for Config fields.
const (
	DefaultMTU         = 9000
	DefaultSendWindow  = 1024
	DefaultRecvWindow  = 1024
	DefaultMaxMessages = 8192
	DefaultMaxPartial  = 256
	DefaultMaxPeers    = 65536
	// DefaultMaxStrangers, DefaultMaxPeerMessages and
	// DefaultMaxStrangerMessages are the defaults of the fields of the
	// same names.
	DefaultMaxStrangers        = 1024
	DefaultMaxPeerMessages     = 1024
	DefaultMaxStrangerMessages = 64
	// DefaultIdleTimeout is IdleTimeout's floor when zero (see there).
	DefaultIdleTimeout = 30 * time.Second
	DefaultMaxBurst    = 256
	DefaultInitialRTO  = 20 * time.Millisecond
	DefaultMinRTO      = 2 * time.Millisecond
	DefaultMaxRTO      = 200 * time.Millisecond
	DefaultDeadTimeout = 5 * time.Second
	DefaultTargetDelay = 500 * time.Microsecond
	DefaultInitialCwnd = 16
)

// MaxAckDelay is the longest a receiver holds the ACK of a lone
// response for data to ride on (see Config.ImmediateAcks); senders on
// the point-to-point group add it to their retransmission timeout, and
// an RTT sample leaves out the delay the ACK reports (its AckDelay).
const MaxAckDelay = time.Millisecond

// ErrConfig is wrapped by every configuration error.
var ErrConfig = errors.New("transport: invalid config")

// Sealed returns c for an engine under a security layer (package
// secure's Layer, which seals every datagram the engine sends and opens
// every one it receives): its MTU (zero: DefaultMTU) leaves room for the
// tag, so that a sealed datagram is no larger than c's MTU, and Verified
// is set.
func (c Config) Sealed() Config {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	c.MTU -= wire.TagLen
	c.Verified = true
	return c
}

// WithDefaults returns c with every zero field set to its documented
// default, as New applies them.
func (c Config) WithDefaults() Config {
	c.setDefaults()
	return c
}

func (c *Config) setDefaults() {
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.SendWindow == 0 {
		c.SendWindow = DefaultSendWindow
	}
	if c.RecvWindow == 0 {
		c.RecvWindow = DefaultRecvWindow
	}
	if c.MaxMessages == 0 {
		c.MaxMessages = DefaultMaxMessages
	}
	if c.MaxPartial == 0 {
		c.MaxPartial = DefaultMaxPartial
	}
	if c.MaxPeers == 0 {
		c.MaxPeers = DefaultMaxPeers
	}
	if c.MaxStrangers == 0 {
		c.MaxStrangers = DefaultMaxStrangers
	}
	if c.MaxPeerMessages == 0 {
		c.MaxPeerMessages = DefaultMaxPeerMessages
	}
	if c.MaxStrangerMessages == 0 {
		c.MaxStrangerMessages = DefaultMaxStrangerMessages
	}
	if c.MaxBurst == 0 {
		c.MaxBurst = DefaultMaxBurst
	}
	if c.InitialRTO == 0 {
		c.InitialRTO = DefaultInitialRTO
	}
	if c.MinRTO == 0 {
		c.MinRTO = DefaultMinRTO
	}
	if c.MaxRTO == 0 {
		c.MaxRTO = DefaultMaxRTO
	}
	if c.DeadTimeout == 0 {
		c.DeadTimeout = DefaultDeadTimeout
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = max(DefaultIdleTimeout, 2*c.DeadTimeout)
	}
	if c.TargetDelay == 0 {
		c.TargetDelay = DefaultTargetDelay
	}
	if c.InitialCwnd == 0 {
		c.InitialCwnd = DefaultInitialCwnd
	}
	if c.MinCwnd == 0 {
		c.MinCwnd = 1
	}
	if c.MaxCwnd == 0 {
		c.MaxCwnd = float64(c.SendWindow)
	}
}

func (c *Config) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrConfig}, a...)...)
	}
	pow2 := func(n int) bool { return n > 0 && n&(n-1) == 0 }
	switch {
	case c.MTU < MinMTU || c.MTU > MaxMTU:
		return bad("MTU %d outside [%d, %d]", c.MTU, MinMTU, MaxMTU)
	case !pow2(c.SendWindow) || c.SendWindow > MaxWindow:
		return bad("SendWindow %d must be a power of two ≤ %d", c.SendWindow, MaxWindow)
	case !pow2(c.RecvWindow) || c.RecvWindow > MaxWindow:
		return bad("RecvWindow %d must be a power of two ≤ %d", c.RecvWindow, MaxWindow)
	case c.MaxMessages < 1, c.MaxPartial < 1, c.MaxPeers < 1, c.MaxBurst < 1,
		c.MaxStrangers < 1, c.MaxPeerMessages < 1, c.MaxStrangerMessages < 1:
		return bad("MaxMessages, MaxPartial, MaxPeers, MaxStrangers, MaxPeerMessages, MaxStrangerMessages and MaxBurst must be positive")
	case c.MinRTO <= 0 || c.MaxRTO < c.MinRTO || c.InitialRTO <= 0:
		return bad("RTO bounds: MinRTO %v, MaxRTO %v, InitialRTO %v", c.MinRTO, c.MaxRTO, c.InitialRTO)
	case c.DeadTimeout <= 0 || c.TargetDelay <= 0:
		return bad("DeadTimeout and TargetDelay must be positive")
	case c.IdleTimeout < c.DeadTimeout:
		return bad("IdleTimeout %v below DeadTimeout %v", c.IdleTimeout, c.DeadTimeout)
	case c.MinCwnd < 1 || c.MaxCwnd < c.MinCwnd || c.InitialCwnd < c.MinCwnd:
		return bad("cwnd bounds: min %v initial %v max %v", c.MinCwnd, c.InitialCwnd, c.MaxCwnd)
	}
	return nil
}

// segSize is the payload bytes per packet.
func (c *Config) segSize() int {
	s := c.MTU - wire.HeaderLen
	if s > wire.MaxPayload {
		s = wire.MaxPayload
	}
	return s &^ 7
}
