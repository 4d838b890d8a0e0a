package simnet

import "net/netip"

type evKind uint8

const (
	evPoll    evKind = iota // call Poll on host
	evTimer                 // host's deadline: call Poll on host
	evFabric                // datagram reaches the crossbar from src's up link
	evDeliver               // datagram reaches host from its down link
	evResume                // host's stall ends: hand it what arrived meanwhile
)

// event is one entry of the event queue. Events are recycled through the
// network's free list; idx is the event's position in the heap (-1 when not
// queued) so a node's timer can be moved or removed in place.
type event struct {
	at   int64  // virtual ns since Epoch
	seq  uint64 // insertion order, breaks ties in at
	idx  int
	kind evKind
	ctl  bool  // evFabric, evDeliver: a Control datagram
	host *host // evPoll, evTimer, evDeliver: the node concerned
	src  netip.AddrPort
	dst  netip.AddrPort
	buf  []byte // evFabric, evDeliver: owned payload, from the buffer pool
}

// eventHeap is a min-heap of events ordered by (at, seq), driven through
// container/heap.
type eventHeap []*event

func (h eventHeap) Len() int { return len(h) }

func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}

func (h eventHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].idx = i
	h[j].idx = j
}

func (h *eventHeap) Push(x any) {
	e := x.(*event)
	e.idx = len(*h)
	*h = append(*h, e)
}

func (h *eventHeap) Pop() any {
	old := *h
	n := len(old) - 1
	e := old[n]
	old[n] = nil
	e.idx = -1
	*h = old[:n]
	return e
}
