package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

func (ep *Endpoint) enableGroups() {
	ep.mu.Lock()
	ep.core.EnableGroups()
	ep.mu.Unlock()
}

// Group is this endpoint's membership in a job group created by a
// rendezvous at a forwarding node: multicast and aggregation to the other
// members go through the switch, one transmission per operation.
type Group struct {
	ep      *Endpoint
	sw      netip.AddrPort
	id      uint32
	rank    uint16
	members []ctrl.MemberInfo
	opts    FabricOptions

	stop     chan struct{}
	stopOnce sync.Once
	hbDone   chan struct{}
	// service: the heartbeats of a Service's membership, not of a group.
	service bool
	// confirmed, when set, keeps the send time (unix nanoseconds) of the
	// latest heartbeat the switch answered as alive.
	confirmed *atomic.Int64
	// heard is when (unix nanoseconds) the switch last answered one of
	// the group's heartbeats, or the join.
	heard atomic.Int64
}

// JoinJob joins job (a name agreed by all members) of size members at the
// switch sw, as member rank (-1: let the switch choose). It returns when
// all size members have joined, or fails when ctx ends (or, if ctx has no
// deadline, after Config.OpTimeout): then the endpoint asks the switch
// who joined, for at most JoinStatusTimeout, and the error is a
// *RendezvousError saying which ranks are missing. A switch that never
// acknowledged the join fails it with a *NoAnswerError (ErrNoSwitch).
func (ep *Endpoint) JoinJob(ctx context.Context, sw string, job string, size, rank int, opts FabricOptions) (*Group, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	start := time.Now()
	resp, err := ep.control(ctx, ap, &ctrl.Msg{Type: ctrl.Join, Job: job, Size: size, Rank: rank}, &opts)
	if err != nil {
		var na *NoAnswerError
		if errors.As(err, &na) && na.Acked || !errors.As(err, &na) && errors.Is(err, ErrCanceled) && ctx.Err() != nil {
			// The switch has the join and waits for the other ranks
			// (or, canceled, the join may not have reached it yet).
			return nil, ep.rendezvousError(ctx, ap, job, ctrlclient.WaitedSince(ctx, start), err, opts)
		}
		return nil, fmt.Errorf("endpoint: join %q: %w", job, err)
	}
	if resp.Group == 0 {
		// The switch's refusal of a rank another process holds.
		var holder netip.AddrPort
		if len(resp.Members) == 1 {
			holder = resp.Members[0].Addr
		}
		return nil, fmt.Errorf("%w: rank %d of job %q is already taken by %v", ErrRankTaken, resp.Member, job, holder)
	}
	ep.mu.Lock()
	ep.core.SetMember(resp.Group, resp.Member)
	ep.core.SetGroupSwitch(resp.Group, ap)
	ep.mu.Unlock()
	g := &Group{ep: ep, sw: ap, id: resp.Group, rank: resp.Member, members: append([]ctrl.MemberInfo(nil), resp.Members...),
		opts: opts, stop: make(chan struct{}), hbDone: make(chan struct{})}
	g.heard.Store(time.Now().UnixNano()) // the join's answer
	ep.addCloser(g.stopHeartbeats)
	go g.heartbeats(g.ep.ticker(opts.HeartbeatInterval()))
	return g, nil
}

// JoinStatusTimeout bounds how long JoinJob, whose wait ended, waits for
// the switch to say who joined.
const JoinStatusTimeout = time.Second

// RendezvousError is JoinJob's error when the wait for the job's other
// ranks ended (its context ended, or the op's timeout) before the group
// formed. It matches what ended the wait (errors.Is: context.
// DeadlineExceeded, context.Canceled, ErrTimeout) and, when the switch did
// not answer the question who joined, ErrNoSwitch.
type RendezvousError struct {
	Job    string
	Switch netip.AddrPort
	Wait   time.Duration // how long this endpoint waited
	// Size is the job's size as the switch's rendezvous has it, 0 when
	// the switch holds no rendezvous for the job or did not say.
	Size int
	// Joined and Missing are the ranks that joined and those that did
	// not (this endpoint's own rank counts as joined), in increasing
	// order.
	Joined, Missing []int
	// Err is what ended the wait: ctx's error and the join's own.
	Err error
	// StatusErr is why the switch did not say who joined (a
	// *NoAnswerError when it did not answer); nil when it said.
	StatusErr error
}

// maxMissingShown bounds the missing ranks RendezvousError.Error lists.
const maxMissingShown = 16

func (e *RendezvousError) Error() string {
	var b strings.Builder
	what := "timed out"
	if errors.Is(e.Err, context.Canceled) {
		what = "canceled"
	}
	fmt.Fprintf(&b, "endpoint: join %q: rendezvous %s after %v", e.Job, what, ctrlclient.RoundWait(e.Wait))
	switch {
	case errors.Is(e.StatusErr, ErrNoSwitch):
		fmt.Fprintf(&b, "; no switch answers at %v", e.Switch)
	case e.StatusErr != nil:
		fmt.Fprintf(&b, "; the switch at %v did not say who joined (%v)", e.Switch, e.StatusErr)
	case e.Size == 0:
		fmt.Fprintf(&b, ": the switch at %v holds no rendezvous for the job (it restarted, or the rendezvous expired)", e.Switch)
	default:
		fmt.Fprintf(&b, ": %d of %d ranks joined; missing rank", len(e.Joined), e.Size)
		if len(e.Missing) > 1 {
			b.WriteByte('s')
		}
		for i, r := range e.Missing[:min(len(e.Missing), maxMissingShown)] {
			if i > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, " %d", r)
		}
		if n := len(e.Missing) - maxMissingShown; n > 0 {
			fmt.Fprintf(&b, " and %d more", n)
		}
	}
	return b.String()
}

// Unwrap returns what ended the wait and, if the switch did not say who
// joined, why.
func (e *RendezvousError) Unwrap() []error {
	if e.StatusErr != nil {
		return []error{e.Err, e.StatusErr}
	}
	return []error{e.Err}
}

// rendezvousError asks the switch who joined job after this endpoint's
// join ended with joinErr, waiting wait, and explains it.
func (ep *Endpoint) rendezvousError(ctx context.Context, sw netip.AddrPort, job string, wait time.Duration, joinErr error, opts FabricOptions) error {
	e := &RendezvousError{Job: job, Switch: sw, Wait: wait, Err: joinErr}
	if cerr := ctrlclient.CtxErr(ctx); cerr != nil && !errors.Is(joinErr, cerr) {
		e.Err = errors.Join(joinErr, cerr)
	}
	qctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), JoinStatusTimeout)
	st, err := ep.control(qctx, sw, &ctrl.Msg{Type: ctrl.JoinStatus, Job: job}, &opts)
	cancel()
	if err != nil {
		e.StatusErr = err
		return e
	}
	e.Size, e.Joined = st.Size, st.JoinedRanks()
	for r, i := 0, 0; r < st.Size; r++ {
		if i < len(e.Joined) && e.Joined[i] == r {
			i++
			continue
		}
		e.Missing = append(e.Missing, r)
	}
	return e
}

// ID is the group id at the switch.
func (g *Group) ID() uint32 { return g.id }

// Rank is this endpoint's member id in the group.
func (g *Group) Rank() int { return int(g.rank) }

// Size is the number of members.
func (g *Group) Size() int { return len(g.members) }

// Members is the member table (id and address of each member).
func (g *Group) Members() []ctrl.MemberInfo { return g.members }

// heartbeats sends a heartbeat every interval without waiting for the
// previous answer (at most 4 in flight, each given up after 2 intervals),
// so a lost response never silences a live member.
//
// A switch that answers none of them (not even with a refusal) and
// sends nothing else for silentAfter, while this member sent one at every
// interval, is gone (silence): the group's operations fail
// (switchSilent), at every interval while it stays silent, rather than
// wait for it.
//
// The caller makes the ticker (of the interval) before it starts the
// goroutine: on the simulated network its timer then takes its place
// among the endpoint's timers in program order, not in the order the
// scheduler ran the goroutines that made them.
func (g *Group) heartbeats(tick <-chan time.Time, stopTick func()) {
	defer close(g.hbDone)
	iv := g.opts.HeartbeatInterval()
	defer stopTick()
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.Heartbeat, Group: g.id, Member: g.rank}, g.opts.Token)
	if err != nil {
		g.ep.log.Warn("endpoint: heartbeat", "group", g.id, "err", err)
		return
	}
	done := make(chan *Op, 4)
	inflight := 0
	sent := make(map[*Op]time.Time, cap(done)) // in flight: when sent
	sl := newSilence(iv, time.Unix(0, g.heard.Load()), time.Now())
	for {
		select {
		case <-g.stop:
			return
		case op := <-done:
			inflight--
			at := sent[op]
			delete(sent, op)
			if op.Err == nil && g.confirmed != nil && at.UnixNano() > g.confirmed.Load() {
				g.confirmed.Store(at.UnixNano())
			}
			if op.Err == nil || errors.As(op.Err, new(wire.Status)) {
				now := time.Now()
				sl.answer(now)
				g.heard.Store(now.UnixNano())
			}
			if errors.Is(op.Err, wire.StatusMemberDead) || errors.Is(op.Err, wire.StatusNotMember) && !g.service {
				// Counted dead, or the switch no longer knows the
				// group (it restarted): either way the group is over
				// for this member. (A service's member registers
				// again instead.)
				g.countedDead()
			}
			if op.Err != nil && !errors.Is(op.Err, ErrClosed) {
				g.ep.log.Debug("endpoint: heartbeat", "group", g.id, "err", op.Err)
			}
			continue
		case <-tick:
		}
		now := time.Now()
		sl.heard(g.switchHeard())
		if quiet, gone := sl.check(now); gone && !g.service {
			g.switchSilent(quiet.Round(time.Millisecond))
		}
		if inflight >= cap(done) {
			continue
		}
		op := &Op{Kind: KindControl, Peer: g.sw, Buf: buf, Timeout: 2 * iv}
		sent[op] = now
		if err := g.ep.Start(op, done); err != nil {
			delete(sent, op)
			if errors.Is(err, ErrClosed) {
				return
			}
			continue
		}
		sl.sent(now)
		inflight++
	}
}

// countedDead handles the switch's answer that it counted this member
// dead (its heartbeats stopped arriving in time): the other members have
// failed the operations that needed it and moved on, so every operation
// of this member in the group fails too, with a *MemberError naming this
// member, instead of waiting for members that no longer wait for it.
func (g *Group) countedDead() {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	if g.ep.closed || g.ep.core.DeadMember(g.id, g.rank) != nil {
		return
	}
	g.ep.core.memberDead(&MemberError{Group: g.id, Member: g.rank})
	g.ep.pumpLocked(time.Now())
}

// Err is nil while the switch counts this member alive in the group, and
// a *MemberError naming this member once it answered a heartbeat that it
// counted the member dead or no longer knows the group (it restarted):
// the group is then over for this member, which must join a new one.
func (g *Group) Err() error {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	if me := g.ep.core.DeadMember(g.id, g.rank); me != nil {
		return me
	}
	return nil
}

// Gone returns a *MemberError once the switch told this endpoint that
// member rank died or left the group, else nil. The switch no longer
// waits for such a member: a multicast posted after the notice completes
// with the others (one in flight when it arrived fails, unless it asked
// to continue and the member crashed).
func (g *Group) Gone(rank int) error {
	g.ep.mu.Lock()
	defer g.ep.mu.Unlock()
	if me := g.ep.core.DeadMember(g.id, uint16(rank)); me != nil {
		return me
	}
	return nil
}

func (g *Group) stopHeartbeats() {
	g.stopOnce.Do(func() { close(g.stop) })
	<-g.hbDone
}

// Leave tells the switch this member is leaving and stops its heartbeats.
// Other members see a *MemberError with Left set for operations that
// needed it.
//
// The endpoint then forgets the group (Core.LeaveGroup): call Leave after
// the group's operations completed.
func (g *Group) Leave(ctx context.Context) error {
	// Eager multicasts complete for their callers before every member
	// has them: let them finish (for at most CloseLinger) before the
	// switch forgets this member.
	g.ep.mu.Lock()
	g.ep.lingerLocked(func() bool { return g.ep.core.eagerOut == 0 || ctx.Err() != nil })
	g.ep.mu.Unlock()
	g.stopHeartbeats()
	if time.Since(time.Unix(0, g.heard.Load())) > silentAfter(g.opts.HeartbeatInterval()) {
		// The switch has answered none of the last heartbeats: it died,
		// stalled or is cut off, and the group's operations have failed
		// or will. The LEAVE goes out, but is not waited for beyond two
		// heartbeat intervals (a dead switch would hold Leave for the
		// control exchange's whole timeout); a switch that is alive
		// counts the member gone from its silence anyway.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*g.opts.HeartbeatInterval())
		defer cancel()
	}
	_, err := g.ep.control(ctx, g.sw, &ctrl.Msg{Type: ctrl.Leave, Group: g.id, Member: g.rank}, &g.opts)
	g.ep.mu.Lock()
	g.ep.core.LeaveGroup(g.id)
	g.ep.mu.Unlock()
	return err
}
