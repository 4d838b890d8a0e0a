package coll

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"github.com/ndma/ndma/netio/simnet"
	"github.com/ndma/ndma/wire"
)

// hierCall runs one two-level collective, chosen by the call number.
func hierCall(ctx context.Context, c *Communicator, call int) error {
	n := c.Size()
	root := call % n
	switch call % 9 {
	case 8:
		return c.Alltoall(ctx, make([]byte, n<<10), make([]byte, n<<10))
	case 5:
		return c.ReduceScatterBytes(ctx, make([]byte, n<<10), make([]byte, 1<<10), wire.DtypeI32, Sum)
	case 6:
		return c.Gather(ctx, make([]byte, 1<<10), make([]byte, n<<10), root)
	case 7:
		return c.Scatter(ctx, make([]byte, n<<10), make([]byte, 1<<10), root)
	case 3:
		return c.Allgather(ctx, make([]byte, 1<<10), make([]byte, n<<10))
	case 0:
		return c.AllreduceBytes(ctx, nil, make([]byte, 2*leaderPiece*shmChunk+8<<10), wire.DtypeF32, Sum) // several of the leaders' pieces
	case 1:
		return c.Bcast(ctx, make([]byte, 4<<10), root)
	case 2:
		buf := make([]byte, 8<<10)
		return c.ReduceBytes(ctx, buf, buf, wire.DtypeI64, Max, root)
	}
	return c.Barrier(ctx)
}

// TestSimHierarchyDeadRank: a rank of the 3+1+2 layout crashes while
// the ranks repeat two-level collectives (it stops writing to its host's
// segment and its endpoint closes): every other rank's call fails with a
// *RankError within a bound — with a switch, the switch's report of the
// death (heartbeat timeout); without, Config.Liveness per rank a
// failure travels through — and no segment is left in /dev/shm.
func TestSimHierarchyDeadRank(t *testing.T) {
	simShm(t)
	l := hierLayouts[2]
	n := len(l.host)
	const liveness = 250 * time.Millisecond
	for _, innet := range []bool{true, false} {
		// A leader, a rank beside a leader, a rank alone on its host.
		for i, victim := range []int{0, 2, 5, 3} {
			t.Run(fmt.Sprintf("innet=%v/rank%d", innet, victim), func(t *testing.T) {
				bound := 3 * time.Second
				if !innet {
					// A leader's send to a crashed leader ends at the
					// transport's dead timeout (5 s), a receive after
					// Liveness; then the failure reaches the host.
					bound = 5*time.Second + 3*liveness
				}
				configure := hierConfig(l, func(cfg *Config) {
					if !innet {
						cfg.Liveness = liveness
					}
				})
				simWorldConfig(t, n, innet, figLink(), int64(20+i), configure, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
					defer closeComms(t, comms)
					hierKill(t, comms, victim, innet, time.Duration(3+i)*time.Millisecond, bound)
				})
				if left := segmentsLeft(t); len(left) > 0 {
					t.Fatalf("segments left: %v", left)
				}
			})
		}
	}
}

// hierKill runs collectives on every rank until the victim crashes after
// killAfter, and checks how the others fail.
func hierKill(t *testing.T, comms []*Communicator, victim int, innet bool, killAfter, bound time.Duration) {
	n := len(comms)
	errs := make([]error, n)
	failedAt := make([]time.Time, n)
	calls := make([]int, n)
	var killed time.Time
	vctx, kill := context.WithCancel(context.Background())
	defer kill()
	var wg sync.WaitGroup
	for r, c := range comms {
		ctx := context.Background()
		if r == victim {
			ctx = vctx
		}
		wg.Go(func() {
			for {
				if err := hierCall(ctx, c, calls[r]); err != nil {
					errs[r] = err
					failedAt[r] = time.Now()
					return
				}
				calls[r]++
			}
		})
	}
	time.Sleep(killAfter)
	killed = time.Now()
	if h := comms[victim].hier; h != nil {
		h.silent.Store(true)
	}
	kill()
	comms[victim].ep.Close()
	wg.Wait()
	took := make([]time.Duration, n)
	for r, at := range failedAt {
		took[r] = at.Sub(killed)
	}
	named := 0
	for r, err := range errs {
		if r == victim {
			continue
		}
		var re *RankError
		if !errors.As(err, &re) {
			t.Fatalf("rank %d: %v, want a RankError", r, err)
		}
		if innet && re.Rank != victim {
			t.Errorf("rank %d: %v, want it to name rank %d", r, err, victim)
		}
		if re.Rank == victim {
			named++
		}
		if took[r] > bound {
			t.Errorf("rank %d failed %v after the crash, bound %v", r, took[r], bound)
		}
		t.Logf("rank %d after %d calls, %v: %v", r, calls[r], took[r], err)
	}
	if named == 0 {
		t.Errorf("no survivor names the dead rank %d", victim)
	}
}

// TestSimHierarchySetupCrash: a rank that dies before it maps its host's
// segment fails the leader's New after Config.Liveness, and the segment
// is gone from /dev/shm all the same.
func TestSimHierarchySetupCrash(t *testing.T) {
	simShm(t)
	l := hierLayout{"1x3", []int{0, 0, 0}, 1}
	const victim = 2
	errDied := errors.New("rank died before mapping the segment")
	testHookMapSegment = func(r int) error {
		if r == victim {
			return errDied
		}
		return nil
	}
	defer func() { testHookMapSegment = nil }()
	configure := hierConfig(l, func(cfg *Config) { cfg.Liveness = 250 * time.Millisecond })
	simWorldJoin(t, len(l.host), false, figLink(), 31, configure, func(t *testing.T, _ *simnet.Network, comms []*Communicator, errs []error) {
		defer closeComms(t, comms)
		if !errors.Is(errs[victim], errDied) {
			t.Fatalf("rank %d: %v, want the hook's error", victim, errs[victim])
		}
		var re *RankError
		if !errors.As(errs[0], &re) || re.Rank != victim {
			t.Fatalf("leader: %v, want a RankError naming rank %d", errs[0], victim)
		}
		if left := segmentsLeft(t); len(left) > 0 {
			t.Fatalf("segments left: %v", left)
		}
	})
}

// TestSimHierarchyArgMismatch: a rank that passes another length than
// the others fails the call on every rank with ErrArg, on its host
// through the segment and on the others through the leaders.
func TestSimHierarchyArgMismatch(t *testing.T) {
	simShm(t)
	l := hierLayouts[2]
	for _, innet := range []bool{true, false} {
		t.Run(fmt.Sprintf("innet=%v", innet), func(t *testing.T) {
			simWorldConfig(t, len(l.host), innet, figLink(), 41, hierConfig(l, nil), func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
				defer closeComms(t, comms)
				errs := make([]error, len(comms))
				var wg sync.WaitGroup
				for r, c := range comms {
					wg.Go(func() {
						ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
						defer cancel()
						size := 64
						if r == 1 {
							size = 128
						}
						errs[r] = c.AllreduceBytes(ctx, nil, make([]byte, size), wire.DtypeF32, Sum)
					})
				}
				wg.Wait()
				for r, err := range errs {
					if !errors.Is(err, ErrArg) {
						t.Errorf("rank %d: %v, want ErrArg", r, err)
					}
				}
			})
		})
	}
}

// TestSimHierarchyProcessGone: a rank whose process no longer exists (its
// line in the segment names a process that exited) fails its host's
// calls, naming it, with no liveness bound and no switch to say so: a
// rank that waits on it finds the process gone, the others learn it
// from the host's abort word.
func TestSimHierarchyProcessGone(t *testing.T) {
	simShm(t)
	prog, args := os.Args[0], []string{"-test.run=^$"}
	if p, err := exec.LookPath("true"); err == nil {
		prog, args = p, nil
	}
	child := exec.Command(prog, args...)
	if err := child.Run(); err != nil {
		t.Skipf("cannot run a child process: %v", err)
	}
	dead := child.Process.Pid
	if !processGone(dead) {
		t.Skipf("process %d exited but its id is taken again", dead)
	}
	if processGone(os.Getpid()) {
		t.Fatal("this process counts as gone")
	}
	l := hierLayout{"1x3", []int{0, 0, 0}, 1}
	const victim = 2
	configure := hierConfig(l, func(cfg *Config) { cfg.Liveness = -1 })
	simWorldConfig(t, len(l.host), false, figLink(), 61, configure, func(t *testing.T, _ *simnet.Network, comms []*Communicator) {
		defer closeComms(t, comms)
		vctx, kill := context.WithCancel(context.Background())
		errs := make([]error, len(comms))
		var wg sync.WaitGroup
		for r, c := range comms {
			ctx := context.Background()
			if r == victim {
				ctx = vctx
			}
			wg.Go(func() {
				for call := 0; ; call++ {
					if errs[r] = hierCall(ctx, c, call); errs[r] != nil {
						return
					}
				}
			})
		}
		time.Sleep(2 * time.Millisecond)
		h := comms[victim].hier
		h.silent.Store(true)
		h.seg.pid(h.me).Store(uint64(dead))
		kill()
		wg.Wait()
		found := 0
		for r, err := range errs {
			if r == victim {
				continue
			}
			var re *RankError
			if !errors.As(err, &re) || re.Rank != victim {
				t.Errorf("rank %d: %v, want a RankError naming rank %d", r, err, victim)
			}
			if errors.Is(err, errProcessGone) {
				found++ // the others may learn it from the abort word
			}
		}
		if found == 0 {
			t.Errorf("no rank found rank %d's process gone: %v", victim, errs)
		}
	})
}
