package endpoint

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// PoolServe makes an endpoint a memory node of a pool (Config.PoolNode):
// its memory server (memnode/server) serves the pool requests and grants
// of the switch it names.
type PoolServe = server.PoolServe

// memHost is the Core as its memory server's host: the server answers
// on the Core's transport and raw queue, and a rebuild reads through the
// Core's pool client.
type memHost Core

func (h *memHost) Reply(peer transport.PeerID, rh *wire.Header, payload []byte) error {
	_, err := h.eng.Send(peer, rh, payload, 0)
	return err
}

func (h *memHost) Raw(to netip.AddrPort, rh *wire.Header, payload []byte) bool {
	return (*Core)(h).queueRaw(to, rh, payload)
}

func (h *memHost) ReadPool(now time.Time, sw netip.AddrPort, region uint32, key, addr uint64, lane uint16, buf []byte, done func(error)) error {
	op := &Op{Kind: KindRead, Peer: sw, Pool: region, Key: key, Addr: addr, Lane: lane, Buf: buf}
	op.onDone = func(op *Op) { done(op.Err) }
	return (*Core)(h).Post(now, op)
}

func (h *memHost) Notify(now time.Time, sw netip.AddrPort, msg []byte) {
	op := &Op{Kind: KindControl, Peer: sw, Buf: msg}
	op.onDone = func(*Op) {}
	_ = (*Core)(h).Post(now, op)
}

// SetIdentities gives the core the certified identity of each peer
// address (a security layer's Layer.Peer): from then on a memory node
// takes pool requests and grants only from a switch whose certificate
// says it is one.
func (c *Core) SetIdentities(peer func(netip.AddrPort) (secure.Cert, bool)) {
	c.mem.SetIdentities(peer)
}

// PoolReports returns the ctrl.PoolReport messages (encoded, with the
// fabric token) that tell the switch incarnation switchInc (from its
// ctrl.PoolNode answer) which grants this memory node holds, the last
// one Final; nil if the node reported to that incarnation already (or
// serves no pool). The caller sends them in order, each after the last
// was answered, and calls PoolReported once all were.
func (c *Core) PoolReports(switchInc uint64) ([][]byte, error) { return c.mem.PoolReports(switchInc) }

// PoolReported records that switch incarnation switchInc has the node's
// report (every message PoolReports returned was answered).
func (c *Core) PoolReported(switchInc uint64) { c.mem.PoolReported(switchInc) }
