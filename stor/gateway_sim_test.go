package stor

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// gateway starts a gateway on its own endpoint; it closes with the test.
func (s *simStor) gateway() *Gateway {
	s.t.Helper()
	ep := s.endpoint("stor/gateway")
	s.ceps = append(s.ceps, ep)
	gw := NewGateway(ep, GatewayConfig{Switch: s.swA.String(), Fabric: s.fab, Logger: s.logger(), Seed: s.drawSeed(ep)})
	if err := gw.Start(s.ctx()); err != nil {
		s.t.Fatalf("seed %d: gateway: %v", s.seed, err)
	}
	s.t.Cleanup(gw.Close)
	return gw
}

// TestSimGatewayOutdatedNode: a node that missed writes forwarded by the
// gateway while it was down never serves them stale: it comes back while
// the nodes that took them are down, the writer (still open through the
// gateway) writes to the same extent again, and when the others return
// every read gives the acknowledged bytes, on every replica.
func TestSimGatewayOutdatedNode(t *testing.T) {
	simStorage(t, 3, 31, func(t *testing.T, s *simStor) {
		s.gateway()
		c := s.client()
		ctx := s.ctx()
		d, err := c.Create(ctx, VolumeSpec{Name: "t", Size: 2 * MinExtent, Extent: MinExtent, Replicas: 3})
		if err != nil {
			t.Fatal(err)
		}
		want := bytes.Repeat([]byte{'A'}, int(d.Size))
		v, err := c.Open(ctx, "t", OpenOptions{Write: true, Controller: GatewayName(DefaultService), Logger: s.logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = v.Close() }()
		if _, err := v.WriteAt(want, 0); err != nil {
			t.Fatal(err)
		}
		if err := v.Flush(); err != nil {
			t.Fatal(err)
		}
		s.crashNode(2)
		// Acknowledged on nodes 0 and 1 only: node 2 is down.
		b := bytes.Repeat([]byte{'B'}, 4096)
		if _, err := v.WriteAt(b, 0); err != nil {
			t.Fatalf("write with node 2 down: %v", err)
		}
		if err := v.Flush(); err != nil {
			t.Fatalf("flush with node 2 down: %v", err)
		}
		copy(want, b)
		s.crashNode(0)
		s.crashNode(1)
		s.startNode(2)
		time.Sleep(5 * time.Second) // the writer's lease reaches node 2
		// A later write to the same extent: node 2 alone must not take
		// it as the volume's current copy.
		c2 := bytes.Repeat([]byte{'C'}, 4096)
		if _, err := v.WriteAt(c2, 8192); err == nil {
			copy(want[8192:], c2)
		} else if !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrNotCurrent) && !errors.Is(err, ErrNoReplica) {
			t.Fatalf("write with only the outdated node up: %v, want it refused as not current", err)
		}
		r, err := c.Open(ctx, "t", OpenOptions{Controller: GatewayName(DefaultService)})
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		if _, err := r.ReadAt(got, 0); err == nil && !bytes.Equal(got, b) {
			t.Fatalf("seed %d: read through the gateway from the node that missed a write: %q, want the acknowledged %q", s.seed, got[0], b[0])
		}
		s.startNode(0)
		s.startNode(1)
		s.waitHealth(c, "t", "healthy")
		all := make([]byte, d.Size)
		if _, err := r.ReadAt(all, 0); err != nil {
			t.Fatal(err)
		}
		if i := firstDiff(all, want); i >= 0 {
			t.Fatalf("seed %d: byte %d reads %q, want the acknowledged %q", s.seed, i, all[i], want[i])
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		s.checkFiles(d, &model{b: want})
	})
}

// TestSimGatewaySwitchRestart: the switch restarts while a writer writes
// through the gateway: the gateway registers again, the writes in flight
// are retried, and every write acknowledged is read back, from every
// replica.
func TestSimGatewaySwitchRestart(t *testing.T) {
	for _, seed := range []int64{32, 33} {
		simStorage(t, 3, seed, func(t *testing.T, s *simStor) {
			s.gateway()
			c := s.client()
			ctx := s.ctx()
			d, err := c.Create(ctx, VolumeSpec{Name: "w", Size: 6 * MinExtent, Extent: MinExtent, Replicas: 2})
			if err != nil {
				t.Fatal(err)
			}
			v, err := c.Open(ctx, "w", OpenOptions{Write: true, Controller: GatewayName(DefaultService), Logger: s.logger()})
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = v.Close() }()
			rng := rand.New(rand.NewPCG(uint64(seed), 1))
			m := &model{b: make([]byte, d.Size)}
			m.write(t, v, rng, 0, int(d.Size))
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			restarted := make(chan struct{})
			delay := time.Duration(rng.IntN(5000)) * time.Microsecond
			go func() {
				defer close(restarted)
				time.Sleep(delay)
				s.srv.Close()
				time.Sleep(2 * time.Second)
				s.startSwitch()
			}()
			for i := 0; ; i++ {
				n := 1 + rng.IntN(2*MinExtent)
				m.write(t, v, rng, rng.IntN(int(d.Size)-n), n)
				if i%5 == 4 {
					if err := v.Flush(); err != nil {
						t.Fatalf("seed %d: flush %d: %v", seed, i, err)
					}
				}
				if i > 40 {
					select {
					case <-restarted:
					default:
						continue
					}
					break
				}
			}
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			m.verify(t, v)
			s.waitHealth(c, "w", "healthy")
			s.checkFiles(d, m)
			if err := v.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestSimGatewayConcurrentWritesAgree: two writes to one block in flight
// at once through the gateway, over lossy links to the nodes (so that a
// node may get one write's retransmission after the other write), reach
// every replica in one order: once both are acknowledged and flushed,
// every replica holds the same bytes.
func TestSimGatewayConcurrentWritesAgree(t *testing.T) {
	simStorage(t, 3, 41, func(t *testing.T, s *simStor) {
		s.gateway()
		c := s.client()
		ctx := s.ctx()
		if _, err := c.Create(ctx, VolumeSpec{Name: "t", Size: MinExtent, Extent: MinExtent, Replicas: 3}); err != nil {
			t.Fatal(err)
		}
		v, err := c.Open(ctx, "t", OpenOptions{Write: true, Controller: GatewayName(DefaultService), Logger: s.logger()})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = v.Close() }()
		lossy := s.link
		lossy.Loss = 0.2
		for i := range s.neps {
			addr := s.neps[i].LocalAddr()
			s.net.Locked(func() { s.net.SetLink(addr, lossy, lossy) })
		}
		const block = 4096
		for round := range 30 {
			var wg sync.WaitGroup
			for w := range 2 {
				b := bytes.Repeat(fmt.Appendf(nil, "round %03d writer %d|", round, w), block)[:block]
				wg.Go(func() {
					if _, err := v.WriteAt(b, 0); err != nil {
						t.Errorf("round %d writer %d: %v", round, w, err)
					}
				})
			}
			wg.Wait()
			if err := v.Flush(); err != nil {
				t.Fatal(err)
			}
			var first []byte
			for i, dir := range s.dirs {
				data, err := os.ReadFile(filepath.Join(dir, "vols", "t", "data"))
				if err != nil || len(data) < block {
					t.Fatalf("node %d: %d bytes, %v", i, len(data), err)
				}
				if i == 0 {
					first = data[:block]
				} else if !bytes.Equal(data[:block], first) {
					t.Fatalf("seed %d round %d: node %d holds %q, node 0 %q: the replicas differ once both writes were acknowledged",
						s.seed, round, i, data[:20], first[:20])
				}
			}
		}
	})
}
