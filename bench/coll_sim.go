package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/coll"
	"github.com/ndma/ndma/fabric"
	"github.com/ndma/ndma/internal/bubble"
	"github.com/ndma/ndma/netio"
	"github.com/ndma/ndma/netio/simnet"
)

// CollSimLink is the simulated network of RunCollSim: every rank (and the
// switch) on its own access link; the switch is the crossbar between them.
type CollSimLink struct {
	// Rate is each rank's link rate in bits per second, both ways; zero
	// means 100 Mbit/s.
	Rate float64
	// Latency is each link's one-way propagation delay (rank to rank
	// crosses two links); zero means 5µs.
	Latency time.Duration
	// Loss is the probability that a datagram is lost, applied on each
	// rank's up link (every datagram crosses exactly one).
	Loss float64
	// Seed seeds the network's randomness and the transports; zero means 1.
	Seed int64
	// Leaves, if not zero, puts the switch's place to a tree of switches:
	// a root (spine) and Leaves leaf switches below it, the ranks in
	// blocks of about Ranks/Leaves per leaf. Switches are crossbars (their
	// links add no delay or serialization): the ranks' links bound the
	// figures, as on one switch.
	Leaves int
}

// DefaultCollSimRate is CollSimLink's default link rate: the rate of the
// target figures and of the testbed.
const DefaultCollSimRate = 100e6

// collSimLimit bounds one simulated run in virtual time, so a stalled
// simulation ends with an error instead of running forever.
const collSimLimit = 24 * time.Hour

func (l *CollSimLink) setDefaults() {
	if l.Rate == 0 {
		l.Rate = DefaultCollSimRate
	}
	if l.Latency == 0 {
		l.Latency = 5 * time.Microsecond
	}
	if l.Seed == 0 {
		l.Seed = 1
	}
}

func (l *CollSimLink) validate() error {
	switch {
	case !(l.Rate > 0):
		return fmt.Errorf("bench: link rate %v: want a positive rate", l.Rate)
	case l.Latency < 0:
		return fmt.Errorf("bench: link latency %v: want a non-negative duration", l.Latency)
	case !(l.Loss >= 0 && l.Loss < 1):
		return fmt.Errorf("bench: loss %v: want a probability in [0, 1)", l.Loss)
	case l.Leaves < 0 || l.Leaves > fabric.MaxChildren:
		return fmt.Errorf("bench: %d leaves: want 0 to %d", l.Leaves, fabric.MaxChildren)
	}
	return nil
}

// RunCollSim measures cfg like RunColl, but with the ranks and the switch
// on a simulated network (netio/simnet) in virtual time: latencies are
// what the links and the protocols give, independent of this machine's
// speed and load. cfg.Switch is ignored: the switch exists when an
// algorithm needs it (innet, auto). emit is called from inside the
// simulation and must not block on anything outside it.
func RunCollSim(cfg CollConfig, link CollSimLink, emit func(CollResult)) error {
	link.setDefaults()
	if err := link.validate(); err != nil {
		return err
	}
	if cfg.Ranks < 1 {
		return fmt.Errorf("bench: %d ranks", cfg.Ranks)
	}
	switches := 0
	for _, a := range cfg.Algos {
		if a == "innet" || a == "auto" {
			switches = max(1, cfg.Switches)
		}
	}
	if switches > coll.MaxSwitches {
		return fmt.Errorf("bench: %d switches, at most %d", switches, coll.MaxSwitches)
	}
	if link.Leaves > 0 && (cfg.Switches > 1 || link.Leaves > cfg.Ranks) {
		return fmt.Errorf("bench: a tree of %d leaves for %d ranks with %d switches per job: want one switch per job and a rank per leaf at least", link.Leaves, cfg.Ranks, cfg.Switches)
	}
	var runErr error
	err := bubble.Run(func() {
		runErr = runCollSim(cfg, link, switches, emit)
	})
	return errors.Join(err, runErr)
}

func runCollSim(cfg CollConfig, link CollSimLink, switches int, emit func(CollResult)) error {
	ctx, cancel := context.WithTimeout(context.Background(), collSimLimit)
	defer cancel()
	nw := simnet.New(link.Seed)
	// Deliveries in an order fixed by the seed, whatever order the
	// ranks' goroutines run in: a run repeats exactly.
	nw.Quiesce = true
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- nw.Serve(sctx) }()
	defer func() {
		stop()
		<-served
	}()
	const ipUDPHeaders = 28
	up := simnet.LinkConfig{Rate: link.Rate, Latency: link.Latency, Overhead: ipUDPHeaders, Loss: link.Loss}
	down := simnet.LinkConfig{Rate: link.Rate, Latency: link.Latency, Overhead: ipUDPHeaders}
	var swConns []netio.Conn
	nsw := switches
	if link.Leaves > 0 && switches > 0 {
		nsw = 1 + link.Leaves
	}
	for s := range nsw {
		// A switch is the crossbar, a port per rank: its own link adds
		// neither serialization nor delay.
		swConns = append(swConns, nw.ListenConn(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, byte(s >> 8), byte(1 + s)}), 7471), simnet.LinkConfig{}, simnet.LinkConfig{}))
	}
	leaves := 0
	if nsw > switches {
		leaves = link.Leaves
	}
	if switches > 1 {
		// A rank's endpoints (one per switch) share its link's rate: each
		// gets its even share, so striping gains no bandwidth the rank
		// does not have.
		up.Rate /= float64(switches)
		down.Rate /= float64(switches)
	}
	w, err := newCollWorld(ctx, cfg.Ranks, cfg.MTU, swConns, uint64(link.Seed), leaves, func(i, s int) (netio.Conn, error) {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(1 + s), byte(i >> 8), byte(i)}), 9000)
		return nw.ListenConn(addr, up, down), nil
	})
	if err != nil {
		return fmt.Errorf("bench: simulated world (seed %d): %w", link.Seed, err)
	}
	defer w.Close()
	if err := RunColl(ctx, w, cfg, emit); err != nil {
		return fmt.Errorf("bench: simulation (seed %d): %w", link.Seed, err)
	}
	return nil
}
