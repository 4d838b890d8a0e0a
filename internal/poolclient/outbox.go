package poolclient

import (
	"net/netip"

	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/wire"
)

// MaxQueued bounds the datagrams an Outbox holds between Flushes.
const MaxQueued = 8192

// Outbox holds the datagrams a core sends outside the transport's
// streams (pool requests and answers) until its next Poll. The zero
// value is ready to use. Not safe for concurrent use.
type Outbox struct {
	raw   []netio.Datagram // datagrams to send at the next Flush
	bufs  netio.Pool       // the datagrams' buffers (one class up to 2 KiB); at most MaxQueued free per class
	inUse [][]byte         // buffers of the last Flush's datagrams
}

// Queue encodes a datagram from h and payload for the next Flush. It
// reports false if MaxQueued are queued already (the caller counts the
// drop).
func (o *Outbox) Queue(to netip.AddrPort, h *wire.Header, payload []byte) bool {
	if len(o.raw) >= MaxQueued {
		return false
	}
	if o.bufs.Min == 0 {
		o.bufs = netio.Pool{Min: 2048, Keep: MaxQueued}
	}
	b, _ := wire.AppendPacket(o.bufs.Get(wire.HeaderLen + len(payload))[:0], h, payload)
	o.raw = append(o.raw, netio.Datagram{Addr: to, Buf: b})
	return true
}

// Flush appends the queued datagrams to out. Their buffers stay valid
// until the next Flush.
func (o *Outbox) Flush(out []netio.Datagram) []netio.Datagram {
	for _, b := range o.inUse {
		o.bufs.Put(b)
	}
	clear(o.inUse)
	o.inUse = o.inUse[:0]
	for _, d := range o.raw {
		o.inUse = append(o.inUse, d.Buf)
	}
	out = append(out, o.raw...)
	clear(o.raw)
	o.raw = o.raw[:0]
	return out
}
