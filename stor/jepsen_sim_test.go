package stor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/internal/jepsen"
)

// The shape of the Jepsen run on a replicated volume.
const (
	jBlock      = 4096                     // a key: one block of the volume
	jExtents    = 3                        // extents of MinExtent
	jHot        = 4                        // blocks per extent the clients use
	jWriters    = 3                        // goroutines of the one writer client
	jReaders    = 2                        // reader clients...
	jReaderGors = 2                        // ...of this many goroutines each
	jFaults     = 30 * time.Second         // the nemesis's schedule
	jQuiet      = 3 * time.Second          // operations go on after the heal
	jPause      = 20 * time.Millisecond    // most time between two operations of a goroutine
	jRecover    = 60 * time.Second         // the volume is whole again this soon after the heal
	jReplicaSet = "node"                   // replica names in the final comparison
	jVolume     = "jepsen"                 // the volume's name
	jLossy      = 0.2                      // loss probability of a lossy link
	jRestart    = 60 * time.Second         // a crashed node is started again within this
	jZeroDesc   = "zeros"                  // the value of a block never written
	jTornDesc   = "never written (id %#x)" // a block's bytes no write wrote
)

// TestSimJepsenVolume runs one writer (several goroutines on one Volume,
// holding the lease) and two reader clients against a 3-replica volume of
// three storage nodes while a nemesis crashes and restarts nodes and the
// switch and makes nodes' links lossy or cuts them, several at once. Each
// block is a register: a write puts a unique write id in the block's
// first 8 bytes and bytes derived from it in the rest, and counts as done
// once a Flush after it returned; a read returns the digest of the
// block's bytes. The history must be linearizable block by block; after
// the heal the volume must be whole again (Stat not degraded), the writer
// able to write, a fresh reader must read what the history allows, and
// the three replicas' backing files must hold the same bytes.
func TestSimJepsenVolume(t *testing.T) {
	// One seed by default (a run takes seconds of CPU); a sweep of
	// seeds is docs/BENCHMARKS.md's, and STOR_JEPSEN_SEEDS runs as many
	// as asked.
	seeds := jSeeds(t, "STOR_JEPSEN_SEEDS", 101) // more on demand: STOR_JEPSEN_SEEDS=104-140
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenVolume(t, seed, false) })
	}
}

// TestSimJepsenGateway is TestSimJepsenVolume with the writer and the
// readers going through a gateway (controller mode: the gateway sends
// each write to each replica itself), which the nemesis crashes and
// starts again too.
func TestSimJepsenGateway(t *testing.T) {
	seeds := jSeeds(t, "STOR_JEPSEN_GW_SEEDS", 401) // more on demand: STOR_JEPSEN_GW_SEEDS=400-430
	for _, seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) { jepsenVolume(t, seed, true) })
	}
}

// jGateway is a gateway the nemesis crashes and starts again.
type jGateway struct {
	s  *simStor
	mu jLock
	ep *endpoint.Endpoint
	gw *Gateway
	wg sync.WaitGroup
}

// start starts the gateway, again every second while it cannot (the
// switch is down) for at most jRestart; with wait, before returning.
func (g *jGateway) start(wait bool) {
	g.wg.Add(1)
	run := func() {
		defer g.wg.Done()
		deadline := time.Now().Add(jRestart)
		for {
			g.mu.Lock()
			err := error(nil)
			if g.gw == nil {
				ep := g.s.endpoint("stor/gateway")
				gw := NewGateway(ep, GatewayConfig{Switch: g.s.swA.String(), Fabric: g.s.fab, Logger: g.s.logger(), Seed: g.s.drawSeed(ep)})
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				if err = gw.Start(ctx); err != nil {
					ep.Close()
				} else {
					g.ep, g.gw = ep, gw
				}
				cancel()
			}
			g.mu.Unlock()
			if err == nil || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Second)
		}
	}
	if wait {
		run()
		return
	}
	go run()
}

// crash stops the gateway at once; it reports false if it was down.
func (g *jGateway) crash() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gw == nil {
		return false
	}
	g.ep.Close()
	g.gw.Close()
	g.ep, g.gw = nil, nil
	return true
}

// jValues names the values of the run: each write's digest by write id.
type jValues struct {
	mu    sync.Mutex
	ids   map[uint64]uint64 // digest → write id
	other map[uint64]uint64 // digest of bytes no write wrote → their id field
}

// block returns the bytes of write id, and records their digest.
func (v *jValues) block(id uint64) ([]byte, uint64) {
	b := make([]byte, jBlock)
	binary.LittleEndian.PutUint64(b, id)
	r := rand.New(rand.NewPCG(id, id))
	for i := 8; i < len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], r.Uint64())
	}
	d := jepsen.Digest(b)
	v.mu.Lock()
	v.ids[d] = id
	v.mu.Unlock()
	return b, d
}

// read returns the digest of a block read, remembering bytes no write
// wrote by their id field.
func (v *jValues) read(b []byte) uint64 {
	d := jepsen.Digest(b)
	v.mu.Lock()
	if _, ok := v.ids[d]; !ok && d != jepsen.Digest(make([]byte, jBlock)) {
		v.other[d] = binary.LittleEndian.Uint64(b)
	}
	v.mu.Unlock()
	return d
}

func (v *jValues) describe(d uint64) string {
	v.mu.Lock()
	defer v.mu.Unlock()
	if id, ok := v.ids[d]; ok {
		return fmt.Sprintf("w%d", id)
	}
	if d == jepsen.Digest(make([]byte, jBlock)) {
		return jZeroDesc
	}
	if id, ok := v.other[d]; ok {
		return fmt.Sprintf(jTornDesc, id)
	}
	return fmt.Sprintf("%#x", d)
}

// jErrors tallies the errors of operations by what they are.
type jErrors struct {
	mu sync.Mutex
	n  map[string]int
}

func (e *jErrors) add(op string, err error) {
	class := "other"
	for _, c := range []struct {
		name string
		err  error
	}{{"no replica", ErrNoReplica}, {"not ready", ErrNotReady}, {"lease held", ErrLeaseHeld},
		{"stale epoch", ErrStaleEpoch}, {"I/O", ErrIO}, {"deadline", context.DeadlineExceeded}} {
		if errors.Is(err, c.err) {
			class = c.name
			break
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n[op+" "+class]++
	if class == "other" && e.n[op+" "+class] == 1 {
		e.n[op+" other: "+err.Error()] = 1
	}
}

func (e *jErrors) String() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	keys := make([]string, 0, len(e.n))
	for k := range e.n {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %s: %d", k, e.n[k])
	}
	return b.String()
}

// jStall is how long the watchdog lets virtual time stand still.
const jStall = time.Minute

// jWatchdog panics, with every goroutine's stack, when virtual time in
// the bubble stops moving for jStall of real time: some goroutine of the
// bubble is blocked on a mutex (or outside the bubble) while the others
// wait for time to pass. tick, called from inside the bubble, keeps it
// fed until done is closed; stop ends the watchdog.
func jWatchdog(seed int64) (tick func(done <-chan struct{}), stop func()) {
	var moved atomic.Int64
	quit := make(chan struct{})
	go func() {
		last, since := moved.Load(), time.Now()
		for {
			select {
			case <-quit:
				return
			case <-time.After(time.Second):
			}
			if m := moved.Load(); m != last {
				last, since = m, time.Now()
			} else if time.Since(since) > jStall {
				debug.SetTraceback("all")
				panic(fmt.Sprintf("seed %d: virtual time stood still for %v at %v: a goroutine of the bubble is blocked on a mutex while the others wait for time to pass (stacks follow)", seed, jStall, time.Duration(last)))
			}
		}
	}()
	tick = func(done <-chan struct{}) {
		start := time.Now()
		go func() {
			for {
				select {
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
					moved.Store(int64(time.Since(start)))
				}
			}
		}()
	}
	return tick, func() { close(quit) }
}

func jKey(block int) string { return fmt.Sprintf("block%03d", block) }

// jNodes guards the storage nodes of a Jepsen run against the nemesis's
// faults and the restarts they leave running.
type jNodes struct {
	s *simStor
	// mu is a lock held across a node's start (network waits): a
	// channel, so that who waits for it waits durably in the bubble.
	mu jLock
	wg sync.WaitGroup // restarts in progress
}

// jLock is a mutex whose waiters block on a channel.
type jLock struct {
	once sync.Once
	c    chan struct{}
}

func (l *jLock) Lock() {
	l.once.Do(func() { l.c = make(chan struct{}, 1) })
	l.c <- struct{}{}
}

func (l *jLock) Unlock() { <-l.c }

// restart starts node i again in the background, as a supervisor would,
// until it comes up (it cannot while the switch is down, and the
// switch's own restart must not wait for it) or jRestart passes.
func (n *jNodes) restart(i int) {
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		deadline := time.Now().Add(jRestart)
		for {
			n.mu.Lock()
			var err error
			if n.s.nodes[i] == nil { // another restart may have won
				err = n.s.tryStartNode(i, 0)
			}
			n.mu.Unlock()
			if err == nil || time.Now().After(deadline) {
				return
			}
			time.Sleep(time.Second)
		}
	}()
}

// jFaultsOf are the faults the nemesis draws from on the nodes of n.
func jFaultsOf(n *jNodes) []jepsen.Fault {
	s := n.s
	var fs []jepsen.Fault
	linkFault := func(name, kind string, i int, loss float64) jepsen.Fault {
		var addr = s.swA
		return jepsen.Fault{Name: name, Kind: kind, Target: fmt.Sprint("node ", i),
			Start: func() error {
				n.mu.Lock()
				defer n.mu.Unlock()
				if s.neps[i] == nil {
					return fmt.Errorf("%w: node %d is down", jepsen.ErrSkip, i)
				}
				addr = s.neps[i].LocalAddr()
				l := s.link
				l.Loss = loss
				s.net.Locked(func() { s.net.SetLink(addr, l, l) })
				return nil
			},
			Stop: func() error {
				s.net.Locked(func() { s.net.SetLink(addr, s.link, s.link) })
				return nil
			}}
	}
	for i := range s.nodes {
		fs = append(fs,
			jepsen.Fault{Name: fmt.Sprint("crash node ", i), Kind: "crash node", Target: fmt.Sprint("node ", i),
				Start: func() error {
					n.mu.Lock()
					defer n.mu.Unlock()
					if s.nodes[i] == nil {
						return fmt.Errorf("%w: node %d is down", jepsen.ErrSkip, i)
					}
					s.crashNode(i)
					return nil
				},
				Stop: func() error {
					n.restart(i)
					return nil
				}},
			linkFault(fmt.Sprint("loss node ", i), "lossy link", i, jLossy),
			linkFault(fmt.Sprint("partition node ", i), "cut link", i, 1))
	}
	fs = append(fs, jepsen.Fault{Name: "crash switch", Kind: "crash switch", Target: "switch",
		Start: func() error { s.srv.Close(); return nil },
		Stop:  func() error { s.startSwitch(); return nil }})
	return fs
}

// jepsenVolume runs one seed; with gateway, the clients go through a
// gateway the nemesis crashes too.
func jepsenVolume(t *testing.T, seed int64, gateway bool) {
	var h *jepsen.History
	vals := &jValues{ids: map[uint64]uint64{}, other: map[uint64]uint64{}}
	errs := &jErrors{n: map[string]int{}}
	var divergent []jepsen.Divergence
	tick, stopWatchdog := jWatchdog(seed)
	defer stopWatchdog()
	// The history is checked also when the run failed on the way (the
	// bubble's failure ends this goroutine too, running its defers).
	defer func() {
		if h != nil {
			jReport(t, seed, h, vals, divergent)
		}
	}()
	simStorage(t, 3, seed, func(t *testing.T, s *simStor) {
		done := make(chan struct{})
		defer close(done)
		tick(done)
		h = jepsen.NewHistory(nil) // on the bubble's clock
		t.Logf("seed %d: the history's times count from %s", seed, time.Now().UTC().Format(time.RFC3339Nano))
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		c := s.client()
		d, err := c.Create(ctx, VolumeSpec{Name: jVolume, Size: jExtents * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		var via string
		gw := &jGateway{s: s}
		if gateway {
			gw.start(true)
			if gw.gw == nil {
				t.Fatalf("seed %d: the gateway did not start", seed)
			}
			defer gw.crash()
			via = GatewayName(DefaultService)
		}
		w, err := c.Open(ctx, jVolume, OpenOptions{Write: true, Logger: s.logger(), Controller: via})
		if err != nil {
			t.Fatal(err)
		}
		var readers []*Volume
		for range jReaders {
			r, err := s.client().Open(ctx, jVolume, OpenOptions{Controller: via})
			if err != nil {
				t.Fatal(err)
			}
			readers = append(readers, r)
		}
		work := jStartWork(seed, h, vals, errs, w, readers)
		defer work.halt()

		nodes := &jNodes{s: s}
		faults := jFaultsOf(nodes)
		if gateway {
			faults = append(faults, jepsen.Fault{Name: "crash gateway", Kind: "crash gateway", Target: "gateway",
				Start: func() error {
					if !gw.crash() {
						return fmt.Errorf("%w: the gateway is down", jepsen.ErrSkip)
					}
					return nil
				},
				Stop: func() error { gw.start(false); return nil }})
		}
		nem, err := jepsen.NewNemesis(rand.New(rand.NewPCG(uint64(seed), 0xfa)), jepsen.NemesisConfig{
			Faults: faults, Total: jFaults, MinGap: 500 * time.Millisecond, MaxGap: 4 * time.Second,
			MinDuration: time.Second, MaxDuration: 8 * time.Second, MaxActive: 3}, h)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("seed %d: nemesis plan %v", seed, nem.Plan())
		if err := nem.Run(ctx); err != nil {
			t.Errorf("seed %d: nemesis: %v", seed, err)
		}
		nodes.wg.Wait() // every crashed node is up again, or could not be
		gw.wg.Wait()
		if gateway && gw.gw == nil {
			t.Errorf("seed %d: the gateway could not be started again", seed)
		}
		jHeal(ctx, t, seed, c, work, w, s.client(), h, vals, d)

		// No two replicas differ (the writer is closed: all is flushed).
		var snaps []jepsen.Snapshot
		for i, dir := range s.dirs {
			if s.nodes[i] == nil {
				t.Errorf("seed %d: node %d could not be started again: its copy is left out of the comparison", seed, i)
				continue
			}
			snaps = append(snaps, jSnapshot(t, seed, i, dir, d))
		}
		divergent = jepsen.CompareReplicas(snaps)
		t.Logf("seed %d: errors by kind:%v", seed, errs)
	})
}
