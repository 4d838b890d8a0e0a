package coll

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/ndma/ndma/endpoint"
)

// How a rank waits for another of its host in the segment: it spins for
// shmSpinTime (the other is usually a step away), then blocks in the kernel
// on the other's phase count (a futex, which the other wakes when it
// publishes a phase) for at most shmBlock at a time. Between those it
// checks its context, the host's abort word and, with a switch,
// whether the switch reported a rank dead; a rank that shows no
// progress (its phase count or its heartbeat) for Config.Liveness is
// taken for dead.
const (
	shmSpins    = 64
	shmSpinTime = 20 * time.Microsecond
	shmBlock    = time.Millisecond
	// shmMaxSleep bounds a sleep between checks where waits sleep
	// instead (shmSleepWaits).
	shmMaxSleep = 50 * time.Microsecond
	// shmBeat is how often a leader working between hosts bumps its
	// heartbeat, and checks the switch's reports of dead ranks.
	shmBeat = 5 * time.Millisecond
)

// shmSleepWaits makes waits sleep rather than block on a futex: tests
// that run in a synctest bubble set it, as a bubble's virtual clock only
// moves while every goroutine is blocked in Go, never in a system call.
var shmSleepWaits = !haveFutex

// ErrHostAborted is the cause in a *RankError of a two-level collective
// that another rank of the host gave up (its context ended, or it
// stopped for a reason of its own): the error names that rank.
var ErrHostAborted = errors.New("coll: a rank of this host gave up the collective")

// errSilent is the error of a rank that tests made silent.
var errSilent = errors.New("coll: this rank was made silent (a test's crash)")

// errFoundDead is the cause in a *RankError of a rank that another rank
// of the host found dead or silent (its abort word says so).
var errFoundDead = errors.New("coll: a rank of this host found it dead or silent")

// Abort word: the kind in the top byte, the world rank + 1 below.
const (
	abortRank = 1 // a rank died or went silent: the rank
	abortArg  = 2 // the ranks' arguments disagree: the rank that found it
	abortGave = 3 // the rank gave up (its context ended...)
)

func abortCode(kind int, rank int) uint64 { return uint64(kind)<<56 | uint64(rank+1) }

// fail stops the host's collectives with err: later calls fail with it,
// and the other local ranks, waiting in the segment, with what the
// abort word says.
func (h *hierarchy) fail(err error) {
	h.mu.Lock()
	if h.broken == nil {
		h.broken = err
	}
	h.mu.Unlock()
	if h.seg == nil || h.silent.Load() {
		return
	}
	var re *RankError
	code := abortCode(abortGave, h.world.rank)
	switch {
	case errors.As(err, &re):
		code = abortCode(abortRank, re.Rank)
	case errors.Is(err, ErrArg):
		code = abortCode(abortArg, h.world.rank)
	}
	h.seg.abortWord().CompareAndSwap(0, code)
}

// aborted is the error the abort word holds, or nil.
func (h *hierarchy) aborted() error {
	w := h.seg.abortWord().Load()
	if w == 0 {
		return nil
	}
	rank := int(w&(1<<56-1)) - 1
	switch w >> 56 {
	case abortRank:
		return &RankError{Rank: rank, Err: errFoundDead, Self: rank == h.world.rank}
	case abortArg:
		return fmt.Errorf("%w: rank %d's arguments differ from another rank's on its host", ErrArg, rank)
	}
	return &RankError{Rank: rank, Err: ErrHostAborted}
}

// worldDead returns a *RankError for a rank the switch reported dead
// (not one that left), or nil; always nil without a switch.
func (h *hierarchy) worldDead() error {
	g := h.world.group
	if g == nil {
		return nil
	}
	if err := g.Err(); err != nil {
		return &RankError{Rank: h.world.rank, Err: err, Self: true}
	}
	for r := range h.world.size {
		var me *endpoint.MemberError
		if err := g.Gone(r); errors.As(err, &me) && !me.Left {
			return &RankError{Rank: r, Err: err}
		}
	}
	return nil
}

// check is what ends a wait besides progress: ctx, the abort word, a
// rank reported dead.
func (h *hierarchy) check(ctx context.Context, dead bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := h.aborted(); err != nil {
		return err
	}
	if dead {
		return h.worldDead()
	}
	return nil
}

// errProcessGone is the cause in a *RankError of a rank whose process no
// longer exists.
var errProcessGone = errors.New("coll: its process is gone (it exited or was killed)")

// gone returns a *RankError when local rank j's process no longer
// exists (checked only where process ids mean the same as here).
func (h *hierarchy) gone(j int) error {
	ns := h.seg.pidNS(j).Load()
	if ns == 0 || ns != h.pidns {
		return nil
	}
	if processGone(int(h.seg.pid(j).Load())) {
		return &RankError{Rank: h.local[j], Err: errProcessGone}
	}
	return nil
}

// sync completes a phase: this rank publishes it, then waits until every
// local rank has.
func (h *hierarchy) sync(ctx context.Context) error {
	h.gen++
	if h.silent.Load() {
		return &RankError{Rank: h.world.rank, Err: errSilent, Self: true}
	}
	h.seg.gen(h.me).Store(h.gen)
	if h.seg.waiters(h.me).Load() > 0 {
		futexWakeAll(h.seg.genWord(h.me))
	}
	for j := range h.local {
		if j != h.me {
			if err := h.wait(ctx, j, h.gen); err != nil {
				return err
			}
		}
	}
	return nil
}

// wait waits until local rank j has completed phase target.
func (h *hierarchy) wait(ctx context.Context, j int, target uint64) error {
	g, b := h.seg.gen(j), h.seg.beat(j)
	var spinStart time.Time
	for i := 0; ; i++ {
		if g.Load() >= target {
			return nil
		}
		if i%shmSpins == shmSpins-1 {
			// Spin for shmSpinTime (sleeping waits: shmSpins times).
			if shmSleepWaits {
				break
			}
			if spinStart.IsZero() {
				spinStart = time.Now()
			} else if time.Since(spinStart) > shmSpinTime {
				break
			}
		}
		if shmSleepWaits {
			runtime.Gosched()
		} else {
			osYield()
		}
	}
	lastGen, lastBeat, since := g.Load(), b.Load(), time.Now()
	sleep := time.Microsecond
	for polls := 0; ; polls++ {
		if err := h.check(ctx, polls%32 == 0); err != nil {
			return err
		}
		if polls%32 == 16 {
			if err := h.gone(j); err != nil {
				return err
			}
		}
		if shmSleepWaits {
			time.Sleep(sleep)
			sleep = min(2*sleep, shmMaxSleep)
		} else {
			h.seg.waiters(j).Add(1)
			futexSleep(h.seg.genWord(j), uint32(lastGen), shmBlock)
			h.seg.waiters(j).Add(-1)
		}
		v, w := g.Load(), b.Load()
		switch {
		case v >= target:
			return nil
		case v != lastGen || w != lastBeat:
			lastGen, lastBeat, since = v, w, time.Now()
		case h.idle > 0 && time.Since(since) > h.idle:
			return &RankError{Rank: h.local[j], Err: endpoint.ErrPeerSilent}
		}
	}
}

// between runs f, a leader's step between hosts, while bumping this
// rank's heartbeat (the local ranks wait for it meanwhile), and, with a
// switch, cancels it when the switch reports a rank dead (a leader
// waiting on another host's leader would otherwise wait on a host that
// gave up).
func (h *hierarchy) between(ctx context.Context, f func(ctx context.Context) error) error {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := h.leaders.nextCall()
	h.stepped = true
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(shmBeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if h.seg != nil && !h.silent.Load() {
				h.seg.beat(h.me).Add(1)
			}
			if err := h.worldDead(); err != nil {
				cancel(err)
				return
			}
			if err := h.leaders.abortedCall(next); err != nil {
				cancel(err)
				return
			}
		}
	}()
	err := f(cctx)
	close(done)
	<-stopped
	if cause := context.Cause(cctx); err != nil && cause != nil && ctx.Err() == nil {
		var re *RankError
		if errors.As(cause, &re) || errors.Is(cause, ErrArg) {
			return cause
		}
	}
	return err
}

// leaderStep is between for a step that only runs operations of the
// leaders' communicator: their errors name world ranks (fromLeaders).
func (h *hierarchy) leaderStep(ctx context.Context, f func(ctx context.Context) error) error {
	return h.between(ctx, func(ctx context.Context) error { return h.fromLeaders(f(ctx)) })
}

// fromLeaders names the world rank in a *RankError of the leaders'
// communicator, which numbers the hosts.
func (h *hierarchy) fromLeaders(err error) error {
	var re *RankError
	if errors.As(err, &re) && re.Rank >= 0 && re.Rank < len(h.lead) {
		return &RankError{Rank: h.lead[re.Rank], Err: re.Err, Self: re.Self}
	}
	return err
}

// tellLeaders, at a leader whose host failed a call on its arguments
// before the leaders' step, aborts that step for the other leaders
// (their calls would wait for this one's part).
func (h *hierarchy) tellLeaders(err error) {
	if h.me != 0 || h.leaders == nil || h.stepped || !errors.Is(err, ErrArg) {
		return
	}
	if seq, cerr := h.leaders.call(); cerr == nil {
		h.leaders.sendAbort(seq, err)
	}
}

// argCode summarizes a call's arguments, which the local ranks compare
// in the call's first phase: an FNV-1a hash of the operation, the length
// and the other arguments.
func argCode(op Operation, n int, parts ...int) uint64 {
	const prime = 1099511628211
	x := uint64(14695981039346656037)
	for i := 0; i < len(op); i++ {
		x = (x ^ uint64(op[i])) * prime
	}
	for _, v := range append([]int{n}, parts...) {
		for k := 0; k < 64; k += 8 {
			x = (x ^ uint64(v)>>k&0xff) * prime
		}
	}
	return x | 1 // never 0
}

// checkArgs is the call's first phase: this rank publishes its argument
// code, completes the phase (after doing work, which must not depend on
// the others' arguments) and compares every local rank's code with its
// own.
func (h *hierarchy) checkArgs(ctx context.Context, code uint64, work func()) error {
	h.calls++
	h.seg.arg(h.me, h.calls).Store(code)
	if work != nil {
		work()
	}
	if err := h.sync(ctx); err != nil {
		return err
	}
	for j, r := range h.local {
		if h.seg.arg(j, h.calls).Load() != code {
			return fmt.Errorf("%w: rank %d called a collective with other arguments than rank %d (same host)", ErrArg, r, h.world.rank)
		}
	}
	return nil
}
