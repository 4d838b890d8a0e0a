package fabric

import (
	"fmt"
	"time"

	"github.com/ndma/ndma/transport"
)

// ControlLimits bounds the tables of the switch's control plane and pool
// directory: every entry has a bound and a lifetime. Zero values select the
// documented defaults.
type ControlLimits struct {
	// RendezvousTimeout is how long a job's rendezvous waits for its
	// missing ranks after the last JOIN it received; then it is dropped
	// and the ranks still waiting are answered StatusBusy. Zero means one
	// minute (far beyond an endpoint's 10 s control timeout, which a
	// joining rank retries within).
	RendezvousTimeout time.Duration
	// MaxRendezvous bounds the jobs whose ranks have not all joined yet;
	// a JOIN that would open one more is answered StatusBusy (running jobs
	// are never evicted). Zero means 256.
	MaxRendezvous int
	// DeadMemberTTL is how long a service group keeps a dead member in the
	// dead list its heartbeat replies carry (a rank that registers again
	// leaves it at once). Job groups keep their dead until the group ends:
	// aggregation needs them. Zero means one minute.
	DeadMemberTTL time.Duration

	// MaxControlMessage is the largest control request the switch
	// reassembles from several packets, in bytes; a longer one is
	// answered StatusTooLarge. Zero means 256 KiB (a REGISTER with
	// ctrl.MaxRanges ranges of ctrl.MaxReplicas replicas is about 212 KiB).
	MaxControlMessage int
	// MaxControlPartial bounds the control requests being reassembled at
	// once, and MaxControlPartialBytes their total declared length in
	// bytes; MaxControlPartialPerSource bounds those of one address. When
	// full, a request from a known member or memory node evicts a
	// stranger's oldest; a stranger's is answered StatusBusy. Zero means
	// 64, 4 MiB and 4.
	MaxControlPartial, MaxControlPartialBytes, MaxControlPartialPerSource int
	// ControlReassemblyTimeout drops a partial control request that got
	// no packet for this long. Zero means transport.DefaultDeadTimeout.
	ControlReassemblyTimeout time.Duration

	// MaxPoolNodes bounds the pool's memory node table (at most
	// fabric.MaxPoolNodes, the wire limit). A new node beyond it evicts the
	// longest-dead node that holds no region copies, or is refused. Zero
	// means MaxPoolNodes.
	MaxPoolNodes int
	// PoolNodeTTL is how long a dead memory node holding no region copies
	// stays in the table before it is forgotten (a node holding copies is
	// kept: its regions report those copies lost). Zero means ten minutes.
	PoolNodeTTL time.Duration

	// MaxPoolClients bounds the addresses proven to receive (a control
	// response from the switch to them was acknowledged). Pool requests
	// from other addresses are served only if the memory node's answer
	// is at most three times the request (anti-amplification). When full,
	// the least recently used address is forgotten. Zero means 16384.
	MaxPoolClients int
	// PoolClientTTL forgets a proven address that sent no pool request or
	// control request for this long. Zero means one hour.
	PoolClientTTL time.Duration
}

func (c *ControlLimits) setDefaults() {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	defD(&c.RendezvousTimeout, time.Minute)
	def(&c.MaxRendezvous, 256)
	defD(&c.DeadMemberTTL, time.Minute)
	def(&c.MaxControlMessage, 256<<10)
	def(&c.MaxControlPartial, 64)
	def(&c.MaxControlPartialBytes, 4<<20)
	def(&c.MaxControlPartialPerSource, 4)
	defD(&c.ControlReassemblyTimeout, transport.DefaultDeadTimeout)
	def(&c.MaxPoolNodes, MaxPoolNodes)
	defD(&c.PoolNodeTTL, 10*time.Minute)
	def(&c.MaxPoolClients, 16384)
	defD(&c.PoolClientTTL, time.Hour)
}

func (c *ControlLimits) validate() error {
	for _, v := range []int{c.MaxRendezvous, c.MaxControlMessage, c.MaxControlPartial, c.MaxControlPartialBytes,
		c.MaxControlPartialPerSource, c.MaxPoolNodes, c.MaxPoolClients} {
		if v < 0 {
			return fmt.Errorf("%w: negative limit in ControlLimits", ErrConfig)
		}
	}
	for _, d := range []time.Duration{c.RendezvousTimeout, c.DeadMemberTTL, c.ControlReassemblyTimeout, c.PoolNodeTTL, c.PoolClientTTL} {
		if d < 0 {
			return fmt.Errorf("%w: negative duration in ControlLimits", ErrConfig)
		}
	}
	if c.MaxPoolNodes > MaxPoolNodes {
		return fmt.Errorf("%w: MaxPoolNodes %d > %d", ErrConfig, c.MaxPoolNodes, MaxPoolNodes)
	}
	if c.MaxControlMessage > transport.MaxMessage {
		return fmt.Errorf("%w: MaxControlMessage %d too large", ErrConfig, c.MaxControlMessage)
	}
	return nil
}

// sweepControl expires the control plane's timed entries: rendezvous,
// partial control requests, proven pool clients, and service groups' old
// dead members. Called with the liveness check.
func (s *Switch) sweepControl(now time.Time) {
	lim := &s.cfg.Limits
	for name, r := range s.jobs {
		if now.Sub(r.last) > lim.RendezvousTimeout {
			s.dropRendezvous(name, r)
		}
	}
	s.asm.sweepLim(now, lim.ControlReassemblyTimeout)
	s.tree.asm.sweepLim(now, lim.ControlReassemblyTimeout)
	s.sweepUpstream(now)
	s.memPool.pclients.sweepTTL(now, lim.PoolClientTTL)
	for _, g := range s.groups {
		if g.service {
			g.pruneDead(now, lim.DeadMemberTTL)
		}
	}
}

// controlPending reports whether timed control-plane entries exist (so
// the liveness check must run).
func (s *Switch) controlPending() bool {
	return len(s.jobs) > 0 || s.asm.len() > 0 || s.memPool.pclients.len() > 0 || len(s.tree.up) > 0
}
