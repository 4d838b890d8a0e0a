package endpoint

import (
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// memHost is the Core as its memory server's host (memnode/server): the
// server answers on the Core's transport.
type memHost Core

func (h *memHost) Reply(peer transport.PeerID, rh *wire.Header, payload []byte) error {
	_, err := h.eng.Send(peer, rh, payload, 0)
	return err
}
