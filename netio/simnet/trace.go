package simnet

import (
	"fmt"
	"net/netip"
	"time"
)

// TraceKind is what a TraceEvent records.
type TraceKind uint8

// Trace kinds. Drops, corruption, reordering and duplication name the link
// (Dir) on which they happened: the sender's up link or the receiver's down
// link.
const (
	// TraceSend: a node handed a datagram to the network in Poll.
	TraceSend TraceKind = iota
	// TraceDeliver: the network called Receive on the destination node.
	TraceDeliver
	// TracePoll: the network called Poll; Src is the node.
	TracePoll
	// TraceDropLoss: the datagram was lost on a link.
	TraceDropLoss
	// TraceDropQueue: the link's queue was full (tail drop).
	TraceDropQueue
	// TraceDropMTU: the datagram was larger than the link's MTU.
	TraceDropMTU
	// TraceDropNoRoute: no node is attached at the destination address.
	TraceDropNoRoute
	// TraceDropDetached: the destination was detached while the datagram
	// was in flight to it.
	TraceDropDetached
	// TraceCorrupt: one bit of the datagram was flipped.
	TraceCorrupt
	// TraceReorder: the datagram was delayed so later ones overtake it.
	TraceReorder
	// TraceDup: the datagram was duplicated.
	TraceDup
)

var traceKindNames = [...]string{
	TraceSend:         "send",
	TraceDeliver:      "deliver",
	TracePoll:         "poll",
	TraceDropLoss:     "drop-loss",
	TraceDropQueue:    "drop-queue",
	TraceDropMTU:      "drop-mtu",
	TraceDropNoRoute:  "drop-noroute",
	TraceDropDetached: "drop-detached",
	TraceCorrupt:      "corrupt",
	TraceReorder:      "reorder",
	TraceDup:          "dup",
}

func (k TraceKind) String() string {
	if int(k) < len(traceKindNames) {
		return traceKindNames[k]
	}
	return fmt.Sprintf("TraceKind(%d)", k)
}

// TraceEvent is one thing that happened in the network, passed to
// Network.Trace.
type TraceEvent struct {
	// Time is the virtual time of the event.
	Time time.Time
	Kind TraceKind
	// Src and Dst are the datagram's addresses; for TracePoll, Src is the
	// polled node and Dst is zero.
	Src, Dst netip.AddrPort
	// Len is the datagram's payload length in bytes (0 for TracePoll).
	Len int
	// Dir is the link of a drop, corruption, reordering or duplication:
	// Up is Src's up link, Down is Dst's down link.
	Dir Dir
	// Buf is the datagram of a TraceSend or TraceDeliver, valid only
	// during the call to Network.Trace (nil for the other kinds).
	Buf []byte
}

// String formats the event on one line, with the time as the offset from
// Epoch, for example "+85µs deliver 10.0.0.1:1->10.0.0.2:1 len=1000".
func (e TraceEvent) String() string {
	t := e.Time.Sub(Epoch())
	switch e.Kind {
	case TracePoll:
		return fmt.Sprintf("+%v poll %v", t, e.Src)
	case TraceSend, TraceDeliver, TraceDropNoRoute, TraceDropDetached:
		return fmt.Sprintf("+%v %v %v->%v len=%d", t, e.Kind, e.Src, e.Dst, e.Len)
	default:
		return fmt.Sprintf("+%v %v %v->%v len=%d link=%v", t, e.Kind, e.Src, e.Dst, e.Len, e.Dir)
	}
}
