package endpoint

import (
	"time"

	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/transport"
)

// Config configures a Core or Endpoint. Zero values select defaults.
type Config struct {
	// Transport configures the reliable transport engine.
	Transport transport.Config
	// OpTimeout bounds every one-sided, control and anycast operation
	// that sets no Timeout of its own. Zero means 10s. Group and message
	// operations (multicast, group receive, aggregation, SendMsg,
	// RecvMsg) have no default deadline, as in MPI: a large collective on
	// a slow network takes as long as it takes. They end when done, at
	// their own Timeout or context deadline, by Cancel, or when the
	// switch reports a member dead or the transport a peer dead (no
	// progress for transport.Config.DeadTimeout).
	OpTimeout time.Duration
	// MaxOps bounds the operations outstanding at once; Post fails with
	// transport.ErrQueueFull beyond it. Zero means 4096.
	MaxOps int
	// Store is the local memory exposed to peers' one-sided operations; nil
	// means a private empty store (peers get StatusBadKey).
	Store *memnode.Store
	// MaxUnexpected bounds the bytes of messages (multicast and
	// two-sided) buffered because no receive was posted for them yet. A
	// message is charged its full length when its first fragment arrives,
	// and every later fragment must agree with that length, so what is
	// buffered never exceeds the charge. Messages from strangers (a
	// source with no stream of this core's sends or receives, a group
	// this core is not a member of) may take at most a quarter of it.
	// Beyond it a new message is held back: its packets are not
	// acknowledged and the sender resends them, so nothing is lost; a
	// posted receive always admits its own message. Zero means 64 MiB.
	MaxUnexpected int
	// MaxUnexpectedMsgs bounds the number of such buffered messages, a
	// quarter of them from strangers, in the same way. Zero means 16384.
	MaxUnexpectedMsgs int
	// MaxResponse bounds a control or anycast reply, and an anycast
	// request served here, in bytes. Zero means 64 MiB.
	MaxResponse int
	// MaxIncoming bounds the anycast requests this core holds at once:
	// those being received plus those handed to a handler (Requests) and
	// not yet answered (Reply). Beyond it a new request is refused at
	// once with StatusBusy, which its client sees (nothing waits on
	// anything, so this cannot deadlock). Zero means 1024.
	MaxIncoming int
	// MaxIncomingBytes bounds the bytes of anycast requests being
	// received; beyond it a new request is refused with StatusBusy. A
	// partial request idle for the transport's DeadTimeout is forgotten.
	// Zero means 64 MiB.
	MaxIncomingBytes int
}

// WithDefaults returns c with every zero field set to its documented
// default, as NewCore applies them (the transport configuration keeps its
// own zero fields: see transport.Config.WithDefaults).
func (c Config) WithDefaults() Config {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.OpTimeout == 0 {
		c.OpTimeout = 10 * time.Second
	}
	def(&c.MaxOps, 4096)
	def(&c.MaxUnexpected, 64<<20)
	def(&c.MaxResponse, 64<<20)
	def(&c.MaxIncoming, 1024)
	def(&c.MaxUnexpectedMsgs, 16384)
	def(&c.MaxIncomingBytes, 64<<20)
	return c
}
