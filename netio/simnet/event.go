package simnet

import (
	"math/bits"
	"net/netip"
)

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

// bufPool recycles payload buffers in power-of-two size classes from 64
// bytes to 64 KiB, which covers netio.MaxDatagram. Its size is bounded by
// the largest number of datagrams in flight at once.
type bufPool struct {
	free [bufClasses][][]byte
}

const (
	bufMinShift = 6
	bufClasses  = 17 - bufMinShift // 2^6 .. 2^16
)

func bufClass(n int) int {
	if n <= 1<<bufMinShift {
		return 0
	}
	return bits.Len(uint(n-1)) - bufMinShift
}

// get returns a buffer of length n (n <= 1<<16) holding arbitrary bytes.
func (p *bufPool) get(n int) []byte {
	c := bufClass(n)
	if f := p.free[c]; len(f) > 0 {
		b := f[len(f)-1]
		f[len(f)-1] = nil
		p.free[c] = f[:len(f)-1]
		return b[:n]
	}
	return make([]byte, n, 1<<(c+bufMinShift))
}

// put returns b, obtained from get, to the pool.
func (p *bufPool) put(b []byte) {
	if b == nil {
		return
	}
	c := bufClass(cap(b))
	p.free[c] = append(p.free[c], b[:0])
}
