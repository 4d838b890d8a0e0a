package memtest

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/internal/simhost"
	"github.com/ndma/ndma/memnode"
	"github.com/ndma/ndma/memnode/node"
	"github.com/ndma/ndma/memnode/server"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/loop"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// SimConfig configures a SimNode.
type SimConfig struct {
	Switch netip.AddrPort // the switch whose pool the node lends to
	Token  []byte         // the fabric token
	Size   int            // the lent region's size, in bytes
	// Key is the region's key; zero draws a random one (a node started
	// again with the same Key keeps it, as a key file would).
	Key uint64
	// Incarnation tells this start of the node from its others.
	Incarnation uint64
	// Every is the heartbeat: the node offers its region that often, and
	// each offer waits at most twice that for its answer.
	Every time.Duration
	// Transport configures the node's transport engine.
	Transport transport.Config
}

// SimNode is a memory node on the simulated network (netio/simnet): a
// memnode/node Core, with a fresh Store, that lends its region to the
// switch's pool, offering it every SimConfig.Every (its heartbeat) and
// reporting its grants to every switch incarnation it has not reported
// to. It is a simnet.Node: attach it to a network.
type SimNode struct {
	Core *node.Core
	Key  uint64
	cfg  SimConfig
	hb   simhost.Ticker
	now  time.Time // of the current call
	busy bool      // a control request is out
	// The report of its grants to a switch incarnation: messages left
	// to send (the first one out while busy) and the incarnation.
	reports  [][]byte
	reportTo uint64
}

// NewSimNode returns a node with a new Store holding its region.
func NewSimNode(cfg SimConfig) (*SimNode, error) {
	st, err := memnode.NewStore(memnode.Config{})
	if err != nil {
		return nil, err
	}
	key, err := st.Alloc(cfg.Size, wire.PermAll, cfg.Key)
	if err != nil {
		return nil, err
	}
	core, err := node.NewCore(node.Config{Store: st, Transport: cfg.Transport,
		Pool: &server.PoolServe{Switch: cfg.Switch, Key: key, Token: cfg.Token}})
	if err != nil {
		return nil, err
	}
	return &SimNode{Core: core, Key: key, cfg: cfg, hb: simhost.Ticker{Every: cfg.Every}}, nil
}

// Receive hands d to the core.
func (n *SimNode) Receive(now time.Time, d netio.Datagram) {
	n.now = now
	n.Core.Receive(now, d)
}

// Poll offers the region when a heartbeat is due and no request is out,
// and polls the core.
func (n *SimNode) Poll(now time.Time, out []netio.Datagram) ([]netio.Datagram, time.Time) {
	n.now = now
	if !n.busy && n.hb.Due(now) {
		buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.PoolNode, Key: n.Key, Capacity: uint64(n.cfg.Size), Epoch: n.cfg.Incarnation,
			Kept: n.Core.Server().PoolKept()}, n.cfg.Token)
		if err != nil {
			panic(fmt.Sprintf("memtest: encoding an offer: %v", err))
		}
		n.send(buf)
	}
	out, next := n.Core.Poll(now, out)
	if !n.busy {
		// While a request is out, its completion wakes the node.
		next = loop.Earliest(next, n.hb.Next())
	}
	return out, next
}

// send posts a control request to the switch.
func (n *SimNode) send(buf []byte) {
	call := &node.Call{Peer: n.cfg.Switch, Msg: buf, Timeout: 2 * n.cfg.Every, Done: n.answered}
	if n.Core.Post(n.now, call) == nil {
		n.busy = true
	}
}

// answered goes on after the switch answered call: an offer answered by
// a switch incarnation the node has not reported to starts the report; a
// report message answered sends the next one, or ends it.
func (n *SimNode) answered(call *node.Call) {
	n.busy = false
	if call.Err != nil {
		n.reports = nil // started again by the next heartbeat
		return
	}
	var m ctrl.Msg
	if err := secure.ParseCtrl(call.Resp, &m, n.cfg.Token); err != nil {
		return // not the switch's answer: the next heartbeat asks again
	}
	switch m.Type {
	case ctrl.PoolNode:
		msgs, err := n.Core.Server().PoolReports(m.Epoch)
		if err != nil || len(msgs) == 0 {
			return
		}
		n.reports, n.reportTo = msgs, m.Epoch
	case ctrl.PoolReport:
		if len(n.reports) == 0 {
			return
		}
		n.reports = n.reports[1:]
		if len(n.reports) == 0 {
			n.Core.Server().PoolReported(n.reportTo)
			return
		}
	default:
		return
	}
	n.send(n.reports[0])
}
