package simnet

import (
	"fmt"
	"math"
	"time"

	"github.com/ndma/ndma/netio"
)

// Default values used for zero fields of LinkConfig.
const (
	// DefaultMTU is the MTU of a link whose MTU field is zero, in bytes of
	// UDP payload.
	DefaultMTU = netio.MaxDatagram
	// DefaultQueueBytes is the queue limit of a link whose QueueBytes field
	// is zero, in bytes.
	DefaultQueueBytes = 4 << 20
	// defaultReorderSlack is added to 4*Latency to form the default
	// ReorderDelay.
	defaultReorderSlack = 100 * time.Microsecond
)

// LinkConfig describes one direction of a host's access link. The zero
// value is a perfect link: infinite rate, no latency, no loss.
//
// Random impairments (Loss, Reorder, Dup, Corrupt) are decided per datagram
// per link from the network's random source, at the moment the datagram
// enters the link; changing the config with [Network.SetLink] affects only
// datagrams that enter the link afterwards.
type LinkConfig struct {
	// Rate is the link rate in bits per second; zero means infinite (no
	// serialization delay and no queueing).
	Rate float64
	// Latency is the one-way propagation delay, added after the datagram
	// has been serialized.
	Latency time.Duration
	// MTU is the largest UDP payload the link carries, in bytes; larger
	// datagrams are dropped and counted in Stats.DroppedMTU. Zero means
	// DefaultMTU (65507). At most netio.MaxDatagram.
	MTU int
	// Overhead is the number of bytes added to each datagram's payload
	// when computing its serialization time and queue occupancy (for
	// example 28 for IPv4+UDP headers, 66 with Ethernet framing). Zero
	// means none.
	Overhead int
	// QueueBytes is the tail-drop limit of the FIFO at the link's sending
	// side, in bytes of payload plus Overhead, counting every datagram
	// whose serialization has not finished (including the one on the
	// wire). A datagram that does not fit is dropped and counted in
	// Stats.DroppedQueue. Zero means DefaultQueueBytes (4 MiB). It has no
	// effect when Rate is zero.
	QueueBytes int
	// Loss is the probability, in [0, 1], that a datagram is lost after
	// being serialized (it still occupies the link). 1 partitions the
	// link.
	Loss float64
	// Reorder is the probability, in [0, 1], that a datagram's arrival is
	// delayed by an extra uniformly random duration in (0, ReorderDelay],
	// so that later datagrams overtake it. The delay does not hold the
	// link.
	Reorder float64
	// ReorderDelay is the largest extra delay of a reordered datagram;
	// zero means 4*Latency + 100µs.
	ReorderDelay time.Duration
	// Dup is the probability, in [0, 1], that a datagram is delivered
	// twice; the copy arrives right after the original, at the same
	// virtual time, and costs no extra serialization on this link.
	Dup float64
	// Corrupt is the probability, in [0, 1], that exactly one uniformly
	// chosen bit of a non-empty datagram is flipped.
	Corrupt float64
	// ControlFirst gives datagrams marked Control (netio.Datagram: ACKs
	// and the like) strict priority over data at the link's sending
	// side, as a switch port with a priority queue for control traffic:
	// one waits only for the datagram on the wire and the control
	// datagrams ahead of it, and data that enters the link later waits
	// for it. Data already queued keeps its schedule (the control
	// datagram's few microseconds are not taken from it). Control
	// datagrams are dropped when they would wait longer than the queue's
	// QueueBytes take to send. False: one FIFO for all.
	ControlFirst bool
}

// Validate reports whether every field of c is in range. Attach and
// SetLink panic on a config that does not validate.
func (c LinkConfig) Validate() error {
	switch {
	case math.IsNaN(c.Rate) || math.IsInf(c.Rate, 0) || c.Rate < 0:
		return fmt.Errorf("simnet: LinkConfig.Rate %v: want finite and >= 0", c.Rate)
	case c.Latency < 0:
		return fmt.Errorf("simnet: LinkConfig.Latency %v: want >= 0", c.Latency)
	case c.MTU < 0 || c.MTU > netio.MaxDatagram:
		return fmt.Errorf("simnet: LinkConfig.MTU %d: want 0..%d", c.MTU, netio.MaxDatagram)
	case c.Overhead < 0:
		return fmt.Errorf("simnet: LinkConfig.Overhead %d: want >= 0", c.Overhead)
	case c.QueueBytes < 0:
		return fmt.Errorf("simnet: LinkConfig.QueueBytes %d: want >= 0", c.QueueBytes)
	case c.ReorderDelay < 0:
		return fmt.Errorf("simnet: LinkConfig.ReorderDelay %v: want >= 0", c.ReorderDelay)
	}
	for _, p := range [...]struct {
		name string
		v    float64
	}{{"Loss", c.Loss}, {"Reorder", c.Reorder}, {"Dup", c.Dup}, {"Corrupt", c.Corrupt}} {
		if !(p.v >= 0 && p.v <= 1) { // also rejects NaN
			return fmt.Errorf("simnet: LinkConfig.%s %v: want a probability in [0, 1]", p.name, p.v)
		}
	}
	return nil
}

func (c *LinkConfig) mtu() int {
	if c.MTU == 0 {
		return DefaultMTU
	}
	return c.MTU
}

func (c *LinkConfig) queueBytes() int {
	if c.QueueBytes == 0 {
		return DefaultQueueBytes
	}
	return c.QueueBytes
}

func (c *LinkConfig) reorderDelay() time.Duration {
	if c.ReorderDelay == 0 {
		return 4*c.Latency + defaultReorderSlack
	}
	return c.ReorderDelay
}

// txTime is the serialization time of wire bytes at rate bits per second,
// rounded to the nearest nanosecond. rate must be > 0.
func txTime(wire int, rate float64) int64 {
	return int64(math.Round(float64(wire) * 8 * 1e9 / rate))
}

// Dir names one direction of a host's access link.
type Dir uint8

const (
	// Up is the direction from the node to the crossbar.
	Up Dir = iota
	// Down is the direction from the crossbar to the node.
	Down
)

func (d Dir) String() string {
	if d == Up {
		return "up"
	}
	return "down"
}

// link is the state of one link direction: its config and its FIFO. The
// FIFO is kept analytically: busyUntil is when the last accepted datagram
// finishes serialization, and backlog holds (finish time, charge) of every
// datagram not yet finished, so the occupancy at any later time is the sum
// of the charges still in it.
type link struct {
	cfg       LinkConfig
	busyUntil int64 // virtual ns
	ctlBusy   int64 // when the last control datagram (ControlFirst) finishes
	queued    int   // sum of backlog charges, bytes
	backlog   []backlogEntry
	head      int // backlog[head:] is live
}

type backlogEntry struct {
	end    int64
	charge int
}

// onWire returns when the datagram serializing at now finishes, or now if
// none is. drain(now) must have run.
func (l *link) onWire(now int64) int64 {
	if l.head < len(l.backlog) {
		e := l.backlog[l.head]
		if e.end-txTime(e.charge, l.cfg.Rate) <= now {
			return e.end
		}
	}
	return now
}

// drain forgets datagrams whose serialization finished at or before now.
func (l *link) drain(now int64) {
	for l.head < len(l.backlog) && l.backlog[l.head].end <= now {
		l.queued -= l.backlog[l.head].charge
		l.head++
	}
	if l.head == len(l.backlog) {
		l.backlog = l.backlog[:0]
		l.head = 0
	} else if l.head > 1024 && l.head*2 > len(l.backlog) {
		n := copy(l.backlog, l.backlog[l.head:])
		l.backlog = l.backlog[:n]
		l.head = 0
	}
}
