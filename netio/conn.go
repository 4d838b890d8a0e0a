// Package netio is NDMA's packet I/O layer: a batch-first datagram socket
// interface (Conn) implemented by real UDP (recvmmsg/sendmmsg with GSO/GRO
// on Linux, a portable fallback elsewhere) and by the in-process simulated
// network in netio/simnet. Every NDMA process drives its sans-I/O protocol
// core (transport, fabric, memnode) through a Conn, so the same core runs on
// real sockets and in deterministic virtual-time tests.
package netio

import (
	"errors"
	"net/netip"
	"time"
)

// MaxDatagram is the largest UDP payload NDMA sends or receives, in bytes.
// Receive buffers handed to ReadBatch must have at least this capacity.
const MaxDatagram = 65507

// ErrClosed is returned by ReadBatch and WriteBatch after Close.
var ErrClosed = errors.New("netio: connection closed")

// Datagram is one UDP payload together with its peer address.
//
// For ReadBatch the caller supplies Buf with capacity (not length) of at
// least MaxDatagram; the implementation reslices it to the received length
// and fills Addr with the sender. For WriteBatch, Buf is the payload and
// Addr the destination; a non-empty Tail is sent after Buf in the same
// datagram (gathered by the kernel where it can: a header beside a
// payload shared by several datagrams needs no copy). ReadBatch never sets
// Tail or Control.
type Datagram struct {
	Addr netip.AddrPort
	Buf  []byte
	Tail []byte
	// Control marks a datagram that carries no data, only transport
	// control (an acknowledgment, a challenge or its echo), which a
	// network with priority queues may send ahead of queued data
	// (simnet's LinkConfig.ControlFirst; on a UDP socket the IP TOS byte
	// UDPConfig.ControlTOS, which a priority qdisc on the path can act
	// on). Senders set it.
	Control bool
	// RxTime, on a received datagram, is when the kernel received it
	// (Unix ns; SO_TIMESTAMPNS on Linux UDP sockets with GRO), before the
	// process read it; zero where the conn cannot tell.
	RxTime int64
}

// Len is the length of the datagram d sends: Buf and Tail.
func (d *Datagram) Len() int { return len(d.Buf) + len(d.Tail) }

// Joined returns the datagram's bytes in one slice: Buf itself when Tail
// is empty, else a copy of both appended to scratch[:0].
func (d *Datagram) Joined(scratch []byte) []byte {
	if len(d.Tail) == 0 {
		return d.Buf
	}
	return append(append(scratch[:0], d.Buf...), d.Tail...)
}

// Conn is a batch-first datagram socket, modelled on wireguard-go's
// conn.Bind. Implementations are safe for one concurrent reader and one
// concurrent writer.
type Conn interface {
	// ReadBatch blocks until at least one datagram is available, fills
	// ds[0:n] and returns n. It returns ErrClosed after Close.
	ReadBatch(ds []Datagram) (n int, err error)
	// WriteBatch sends every datagram in ds (Buf, then Tail), in order.
	// Datagrams that the network drops are not errors; an error means
	// the socket failed.
	WriteBatch(ds []Datagram) error
	// LocalAddr is the bound address.
	LocalAddr() netip.AddrPort
	// BatchSize is the preferred number of datagrams per call.
	BatchSize() int
	// Close unblocks a pending ReadBatch and releases the socket.
	Close() error
}

// Timer is a one-shot timer, as *time.Timer from time.AfterFunc.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// TimerConn is a Conn whose network orders timer callbacks among the
// other events of an instant (the simulated network, netio/simnet, with
// Quiesce): AfterFunc returns a stopped Timer that, once Reset and due,
// calls f, as time.AfterFunc would, but at a point of the instant the
// network fixes rather than the Go scheduler. A loop.Driver over such a
// Conn takes its timer from it.
type TimerConn interface {
	Conn
	AfterFunc(f func()) Timer
}

// DirectConn is a Conn whose socket a goroutine waiting for a reply can
// read itself, on its own thread, beside the Conn's reader (Linux's
// UDPConn): the kernel then wakes the waiting thread for the datagram,
// instead of waking the reader's, which would then have to wake the
// waiter. That is one thread switch less per round trip where the
// waiter is a C thread (a goroutine locked to its thread, which no other
// thread can run).
type DirectConn interface {
	Conn
	// NewDirectReader returns a reader of its own over the conn's
	// socket. Close it before or after the conn; it fails with ErrClosed
	// once the conn is closed.
	NewDirectReader() (DirectReader, error)
}

// DirectReader reads a DirectConn's socket without Go's poller: one
// goroutine at a time calls TryReadBatch and Wait; Wake may be called from
// any goroutine, and Close once the reading goroutine is done with it.
type DirectReader interface {
	// TryReadBatch is ReadBatch, except that it returns 0, nil at once
	// when nothing has arrived.
	TryReadBatch(ds []Datagram) (int, error)
	// Wait blocks the calling thread until a datagram may be there, Wake
	// is called, or d passes, and returns ErrClosed once the reader or
	// its conn is closed. The thread keeps its Go scheduler slot (P)
	// meanwhile, so other goroutines of a process with GOMAXPROCS=1 wait
	// too: keep d short (the runtime preempts a wait of over ~10 ms).
	Wait(d time.Duration) error
	// Sleep is Wait with the thread's P given back to the runtime for
	// the wait (a blocking system call), so that the process's other
	// goroutines and its network poller run meanwhile; returning may then
	// take a thread switch.
	Sleep(d time.Duration) error
	// Wake makes a Wait in progress, or the next one, return at once.
	Wake()
	// Close releases the reader's descriptors.
	Close() error
}

// ViewReader is a Conn that can hand out received datagrams without
// copying them out of its own buffers.
type ViewReader interface {
	// ReadBatchView is ReadBatch, except that it may set ds[i].Buf to a
	// slice of the connection's own receive buffers (capacity trimmed to
	// the datagram) instead of copying into the caller's: such a Buf is
	// valid until the next ReadBatch or ReadBatchView, and the caller may
	// modify it in place. ds[i].Buf must still have capacity MaxDatagram
	// on entry, for datagrams it reads directly.
	ReadBatchView(ds []Datagram) (n int, err error)
}

// ViewOnlyReader is a ViewReader whose ReadBatchView always hands out
// views and never reads into the caller's buffers: ds[i].Buf may be nil
// on entry. A reader of many such conns (a simulation's thousands of
// endpoints) then needs no receive buffers of its own.
type ViewOnlyReader interface {
	ViewReader
	// ViewsOnly marks the conn; it does nothing.
	ViewsOnly()
}

// ReadViews points ds[i].Buf at bufs[i] (each of capacity MaxDatagram)
// and reads a batch: with c's ReadBatchView where it has one, so that
// ds[i].Buf may instead be a view valid until the next read, else with
// ReadBatch.
func ReadViews(c Conn, ds []Datagram, bufs [][]byte) (int, error) {
	for i := range ds {
		ds[i].Buf = bufs[i]
	}
	if v, ok := c.(ViewReader); ok {
		return v.ReadBatchView(ds)
	}
	return c.ReadBatch(ds)
}
