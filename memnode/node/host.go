package node

import (
	"net/netip"
	"time"

	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// host is the Core as its memory server's host.
type host Core

var _ server.PoolHost = (*host)(nil)

func (h *host) Reply(peer transport.PeerID, rh *wire.Header, payload []byte) error {
	_, err := h.eng.Send(peer, rh, payload, 0)
	return err
}

func (h *host) Raw(to netip.AddrPort, rh *wire.Header, payload []byte) bool {
	if !h.out.Queue(to, rh, payload) {
		h.dropped++
		return false
	}
	return true
}

func (h *host) ReadPool(now time.Time, sw netip.AddrPort, region uint32, key, addr uint64, lane uint16, buf []byte, done func(error)) error {
	return (*Core)(h).readPool(now, sw, region, key, addr, lane, buf, done)
}

func (h *host) Notify(now time.Time, sw netip.AddrPort, msg []byte) {
	_ = (*Core)(h).Post(now, &Call{Peer: sw, Msg: msg})
}

// reader is the Core as the Sender of its rebuilds' pool reads.
type reader Core

// SendSeg encodes the read of segment i of a and queues it.
func (rd *reader) SendSeg(_ time.Time, a *poolAccess, i int) {
	s, r := &a.Segs[i], a.Op
	h := wire.Header{Version: wire.Version, Op: wire.OpRead, Mode: wire.ModePool,
		Group: a.Key.Region, MsgID: s.ID, Key: r.key, Addr: r.addr + uint64(s.Off), Operand1: uint64(s.N)}
	(*host)(rd).Raw(a.Key.Switch, &h, nil)
}

// Unanswered does nothing: the node's heartbeats keep its address
// proven to the switch.
func (rd *reader) Unanswered(time.Time, netip.AddrPort) {}
