package endpoint

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// FabricOptions configure how an endpoint talks to a forwarding node.
type FabricOptions struct {
	// Token authenticates control messages; it must match the switch's,
	// and must not be empty unless Insecure is set.
	Token []byte
	// Insecure talks to a switch that runs without a fabric token: an
	// empty Token is refused without it (every control call fails with
	// an error wrapping secure.ErrNoToken), and a Token with it.
	Insecure bool
	// Heartbeat is the interval between heartbeats to the switch. Zero
	// means 250ms (the switch's default timeout is 1s: keep it at a
	// quarter of the switch's --heartbeat-timeout).
	Heartbeat time.Duration
}

func (o *FabricOptions) heartbeat() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return 250 * time.Millisecond
}

// ErrControl wraps a control exchange the switch refused or answered
// with something unexpected.
var ErrControl = errors.New("endpoint: control exchange failed")

// ErrRankTaken is JoinJob's error when another process (another address)
// already joined the job with the rank asked for.
var ErrRankTaken = errors.New("endpoint: rank taken")

// ErrNoSwitch is matched (errors.Is) by a control exchange's error when
// nothing came back from the switch's address: no acknowledgement of the
// request, no answer. See NoAnswerError.
var ErrNoSwitch = errors.New("endpoint: no switch answers")

// NoAnswerError is a control exchange's error when the switch sent no
// answer in time: the context's deadline passed, the op's timeout
// (Config.OpTimeout) ran out, or the transport gave up on the request.
// It matches ErrNoSwitch when the switch did not even acknowledge the
// request, and whatever its cause matches (ErrTimeout, a
// *transport.PeerError, context.DeadlineExceeded).
type NoAnswerError struct {
	Switch netip.AddrPort
	Wait   time.Duration // from the request to giving up
	// Acked: the switch acknowledged the request (its transport has it)
	// but sent no answer.
	Acked bool
	// Unsealed: this endpoint runs without a security layer, which a
	// switch that seals every datagram drops unanswered (the message
	// says so).
	Unsealed bool
	Err      error // the cause
}

// UnsealedHint ends a NoAnswerError's message when the endpoint seals
// nothing: a switch that requires sealed datagrams drops its requests
// without a word.
const UnsealedHint = " (or it requires sealed datagrams and this process has no credential: NDMA_CREDENTIAL)"

func (e *NoAnswerError) Error() string {
	if e.Acked {
		return fmt.Sprintf("the switch at %v took the request but sent no answer in %v", e.Switch, roundWait(e.Wait))
	}
	msg := fmt.Sprintf("no switch answers at %v after %v", e.Switch, roundWait(e.Wait))
	switch {
	case errors.Is(e.Err, transport.ErrSealRequired):
		msg += ": " + strings.TrimPrefix(transport.ErrSealRequired.Error(), "transport: ")
	case e.Unsealed:
		msg += UnsealedHint
	}
	return msg
}

// Is makes errors.Is(err, ErrNoSwitch) true for a request nothing
// acknowledged.
func (e *NoAnswerError) Is(target error) bool { return target == ErrNoSwitch && !e.Acked }

// Unwrap returns the cause.
func (e *NoAnswerError) Unwrap() error { return e.Err }

// roundWait rounds a wait for a message: to 10ms below a second, to
// 100ms above.
func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// ctxErr is ctx's error, or context.DeadlineExceeded once its deadline
// has passed although ctx has not noticed yet (the op's own timer, set
// from the deadline, may fire first).
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// waitedSince is how long an exchange begun at start waited: up to ctx's
// deadline if that has passed, else until now.
func waitedSince(ctx context.Context, start time.Time) time.Duration {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return dl.Sub(start)
	}
	return time.Since(start)
}

// control sends one control request to the switch and returns its
// response. A request that gets no answer in time (see Config.OpTimeout)
// fails with a *NoAnswerError.
//
// Join, Register and Lookup requests carry this endpoint's MTU; their
// refusals for it (an MTU above the switch's, a job whose members joined
// with another size or MTU) are explained in the error.
//
// An opts without a Token and without Insecure fails before anything is
// sent, with an error wrapping secure.ErrNoToken.
func (ep *Endpoint) control(ctx context.Context, sw netip.AddrPort, req *ctrl.Msg, opts *FabricOptions) (*ctrl.Msg, error) {
	if err := secure.CheckToken(opts.Token, opts.Insecure); err != nil {
		return nil, fmt.Errorf("endpoint: %v to %v: FabricOptions.Token: %w", req.Type, sw, err)
	}
	token := opts.Token
	if req.Type.CarriesMTU() {
		req.MTU = ep.MTU()
	}
	buf, err := secure.AppendCtrl(nil, req, token)
	if err != nil {
		return nil, err
	}
	op := &Op{Kind: KindControl, Peer: sw, Buf: buf}
	start := time.Now()
	if err := ep.Do(ctx, op); err != nil {
		if na := unanswered(ctx, op, err, waitedSince(ctx, start)); na != nil {
			na.Unsealed = ep.sec == nil
			return nil, na
		}
		return nil, explainRefusal(req, err, op.Old)
	}
	resp := &ctrl.Msg{}
	if err := secure.ParseCtrl(op.Resp, resp, token); err != nil {
		return nil, fmt.Errorf("%w: %v response: %w", ErrControl, req.Type, err)
	}
	if !resp.Resp || resp.Type != req.Type {
		return nil, fmt.Errorf("%w: %v answered with %v", ErrControl, req.Type, resp.Type)
	}
	return resp, nil
}

// RecoveringError is a pool request the switch refused because it is
// rebuilding its map of the pool from the memory nodes (it restarted):
// it asks again after Wait. The pool calls wait it out themselves, within
// their context.
type RecoveringError struct {
	Err  error // wire.StatusBusy
	Wait time.Duration
}

func (e *RecoveringError) Error() string {
	return fmt.Sprintf("%v: the switch is rebuilding its pool map from the memory nodes (it restarted); try again in %v", e.Err, e.Wait)
}

func (e *RecoveringError) Unwrap() error { return e.Err }

// controlPool is control for pool requests: while the switch recovers its
// pool map, it waits as told and asks again, until ctx ends.
func (ep *Endpoint) controlPool(ctx context.Context, sw netip.AddrPort, req *ctrl.Msg, opts *FabricOptions) (*ctrl.Msg, error) {
	for {
		resp, err := ep.control(ctx, sw, req, opts)
		var re *RecoveringError
		if !errors.As(err, &re) {
			return resp, err
		}
		t := time.NewTimer(min(max(re.Wait, 10*time.Millisecond), time.Second))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// unanswered returns a *NoAnswerError for a control op that failed with
// err because no answer came in time, nil for any other failure (a
// refusal, a cancellation, a closed endpoint).
func unanswered(ctx context.Context, op *Op, err error, wait time.Duration) *NoAnswerError {
	cerr := ctxErr(ctx)
	if !errors.Is(err, ErrTimeout) && !errors.Is(err, transport.ErrPeerDead) && cerr != context.DeadlineExceeded {
		return nil
	}
	if errors.Is(err, ErrClosed) {
		return nil
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(err, cerr)
	}
	return &NoAnswerError{Switch: op.Peer, Wait: wait, Acked: op.acked, Err: err}
}

// explainRefusal adds what the switch said in Operand1 (operand) to a
// refused Join, Register, Lookup or PoolCreate.
func explainRefusal(req *ctrl.Msg, err error, operand uint64) error {
	if errors.Is(err, wire.StatusAuth) && operand == 0 {
		return fmt.Errorf("%w: the switch did not take this request's fabric token: this process's token (--token-file, --token or $NDMA_TOKEN; NDMA_TOKEN for a launched rank) is not the switch's", err)
	}
	if errors.Is(err, wire.StatusAuth) && operand == ctrl.AuthRoleRefused {
		return fmt.Errorf("%w: the switch does not take %v from this process's credential: its role may not send it", err, req.Type)
	}
	if errors.Is(err, wire.StatusAuth) && operand == ctrl.AuthNameRefused {
		switch req.Type {
		case ctrl.Register:
			return fmt.Errorf("%w: this process's credential does not name service %q: a service S or S.SUFFIX is served by the credentials S, S/INSTANCE and S/RANK only", err, req.Service)
		case ctrl.Join:
			rank := "any rank"
			if req.Rank != ctrl.RankAny {
				rank = fmt.Sprintf("rank %d", req.Rank)
			}
			return fmt.Errorf("%w: this process's credential does not bind job %q as %s: a credential JOB/RANK joins job JOB as rank RANK only, and every credential of scope S joins S's groups S.SUFFIX", err, req.Job, rank)
		}
	}
	if errors.Is(err, wire.StatusBusy) && operand>>56 == ctrl.PoolRecovering {
		return &RecoveringError{Err: err, Wait: time.Duration(operand&(1<<56-1)) * time.Millisecond}
	}
	if req.Type == ctrl.PoolCreate && errors.Is(err, wire.StatusBusy) {
		switch operand >> 56 {
		case 1:
			return fmt.Errorf("%w (%w): the region needs %d memory nodes (a column each, and one per copy) and %d are alive",
				err, ctrl.ErrNoNodes, operand>>16&0xFFFF, operand&0xFFFF)
		case 2:
			want, free := req.Pool.Size*uint64(max(req.Pool.Replicas, 1)), operand&(1<<56-1)
			if want <= free {
				// Enough in all, not in one range: a retry finds the same.
				return fmt.Errorf("%w (%w): %s requested and %s free on the memory nodes it would use, but not in one range per node: freed regions left gaps between those still held; ask for less, or free the regions beside the gaps",
					ctrl.ErrNoSpace, err, humanBytes(want), humanBytes(free))
			}
			return fmt.Errorf("%w (%w): pool full: %s requested, %s free on the memory nodes it would use",
				ctrl.ErrNoSpace, err, humanBytes(want), humanBytes(free))
		}
		return err
	}
	if !req.Type.CarriesMTU() {
		return err
	}
	switch {
	case errors.Is(err, wire.StatusTooLarge) && operand != 0:
		return fmt.Errorf("%w: this endpoint's MTU is %d bytes but the switch takes datagrams of at most %d: set the endpoint's transport MTU (--mtu) to %d or less",
			err, req.MTU, operand, operand)
	case errors.Is(err, wire.StatusBusy) && req.Type == ctrl.Join && operand>>56 == ctrl.JoinBusyConflict:
		rank, size, mtu := ctrl.SplitJoinConflict(operand)
		who := fmt.Sprintf("rank %d", rank)
		if rank < 0 {
			who = "a rank"
		}
		return fmt.Errorf("%w: job %q: %s asked for the job with size %d and MTU %d, this endpoint with size %d and MTU %d: every rank needs the same size and MTU (check the launcher's NDMA_SIZE and NDMA_MTU); the rendezvous was dropped, launch again",
			err, req.Job, who, size, mtu, req.Size, req.MTU)
	case errors.Is(err, wire.StatusBusy) && req.Type == ctrl.Join && operand != 0:
		why := map[uint64]string{
			ctrl.JoinBusyFormed:  "a job of that name is running already with all its ranks (or an anycast service has the name): choose another job name",
			ctrl.JoinBusyFull:    "the switch holds as many groups and rendezvous as it may: try again when jobs end",
			ctrl.JoinBusyNoRank:  "every rank of the job is taken",
			ctrl.JoinBusyExpired: "no rank joined for the switch's rendezvous timeout, so it dropped the rendezvous: start every rank within it",
		}[operand]
		if why == "" {
			return err
		}
		return fmt.Errorf("%w: job %q: %s", err, req.Job, why)
	case errors.Is(err, wire.StatusBadOperand) && req.Type == ctrl.Join && operand != 0:
		size, mtu := ctrl.SplitJoinRefusal(operand)
		return fmt.Errorf("%w: the job's members joined with size %d and MTU %d; this endpoint asked for size %d with MTU %d (every member needs the same size and MTU)",
			err, size, mtu, req.Size, req.MTU)
	}
	return err
}

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
			return nil, ep.rendezvousError(ctx, ap, job, waitedSince(ctx, start), err, opts)
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
	ep.addCloser(g.stopHeartbeats)
	go g.heartbeats()
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
	fmt.Fprintf(&b, "endpoint: join %q: rendezvous %s after %v", e.Job, what, roundWait(e.Wait))
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
	if cerr := ctxErr(ctx); cerr != nil && !errors.Is(joinErr, cerr) {
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
func (g *Group) heartbeats() {
	defer close(g.hbDone)
	iv := g.opts.heartbeat()
	t := time.NewTicker(iv)
	defer t.Stop()
	buf, err := secure.AppendCtrl(nil, &ctrl.Msg{Type: ctrl.Heartbeat, Group: g.id, Member: g.rank}, g.opts.Token)
	if err != nil {
		g.ep.log.Warn("endpoint: heartbeat", "group", g.id, "err", err)
		return
	}
	done := make(chan *Op, 4)
	inflight := 0
	for {
		select {
		case <-g.stop:
			return
		case op := <-done:
			inflight--
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
		case <-t.C:
		}
		if inflight >= cap(done) {
			continue
		}
		op := &Op{Kind: KindControl, Peer: g.sw, Buf: buf, Timeout: 2 * iv}
		if err := g.ep.Start(op, done); err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			continue
		}
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
	_, err := g.ep.control(ctx, g.sw, &ctrl.Msg{Type: ctrl.Leave, Group: g.id, Member: g.rank}, &g.opts)
	g.ep.mu.Lock()
	g.ep.core.LeaveGroup(g.id)
	g.ep.mu.Unlock()
	return err
}

// MulticastOptions tune one multicast.
type MulticastOptions struct {
	// Continue completes the multicast although a member dies (the switch
	// stops waiting for it) instead of failing with a *MemberError.
	Continue bool
	// Eager completes a multicast of at most EagerMulticastMax bytes as
	// soon as the transport holds its own copy, as MPI's eager protocol
	// lets a small send return: the caller's buffer is free at once, and
	// delivery goes on in the background (the transport resends until
	// every member has it). A member's crash is then reported by the
	// group's next operation instead of this one, and Close lingers (up
	// to CloseLinger) until every eager multicast is acknowledged. While
	// eagerBacklog messages to the switch are unacknowledged, a multicast
	// waits as without Eager.
	Eager bool
}

// EagerMulticastMax is the largest multicast that MulticastOptions.Eager
// completes at once; larger ones wait for every member.
const EagerMulticastMax = 16 << 10

// eagerBacklog bounds the messages queued or in flight to the switch
// (or the peer of a send) under which a multicast (a send) may complete
// eagerly; eagerToken marks the transport messages of eager multicasts
// and sends.
const (
	eagerBacklog = 64
	eagerToken   = 1<<64 - 1
)

// StartMulticast sends data to every other member asynchronously: one
// transmission to the switch, which replicates it. data must not change
// until the op completes; completion means every live member has it.
func (g *Group) StartMulticast(data []byte, opts MulticastOptions) (*Op, error) {
	op := &Op{Kind: KindMulticast, Peer: g.sw, Group: g.id, Buf: data, Continue: opts.Continue, Eager: opts.Eager}
	return op, g.ep.Start(op, nil)
}

// Multicast sends data to every other member and waits until all have it.
func (g *Group) Multicast(ctx context.Context, data []byte, opts MulticastOptions) error {
	return g.ep.Do(ctx, &Op{Kind: KindMulticast, Peer: g.sw, Group: g.id, Buf: data, Continue: opts.Continue, Eager: opts.Eager})
}

// StartRecv posts a receive for the next multicast from member from into
// buf, whose length must equal the message's.
func (g *Group) StartRecv(from int, buf []byte) (*Op, error) {
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf}
	return op, g.ep.Start(op, nil)
}

// Recv receives the next multicast from member from into buf.
func (g *Group) Recv(ctx context.Context, from int, buf []byte) error {
	return g.ep.Do(ctx, &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf})
}

// RecvAtMost receives the next multicast from member from into buf,
// which may be longer than the message, and returns the message's length.
func (g *Group) RecvAtMost(ctx context.Context, from int, buf []byte) (int, error) {
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf, AtMost: true}
	if err := g.ep.Do(ctx, op); err != nil {
		return 0, err
	}
	return op.N, nil
}

// Arrived returns the id of the latest multicast from member from that
// arrived here whole (its sender may have seen it complete: every member
// had it), and the id of the latest one a receive took (or waits for).
// Ids count from 1 in the order the sender sent them; a consumer that
// applies what it receives in order has applied everything that arrived
// before a moment once it applied the message with the whole id it read
// then.
func (g *Group) Arrived(from int) (whole, taken uint64) {
	ep := g.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	return ep.core.received(g.id, uint16(from))
}

// TryRecvAtMost receives the next multicast from member from into buf
// (which may be longer than the message) only if it has already arrived
// whole: then it returns the message's length and true. It never waits:
// a message not here yet is left to the next receive. A member that stops
// consuming a group uses it to take what was delivered to it (and
// acknowledged to the sender) before it leaves.
func (g *Group) TryRecvAtMost(from int, buf []byte) (int, bool, error) {
	ep := g.ep
	ep.mu.Lock()
	defer ep.mu.Unlock()
	if ep.closed {
		return 0, false, ErrClosed
	}
	if !ep.core.arrived(g.sw, g.id, uint16(from)) {
		return 0, false, nil
	}
	op := &Op{Kind: KindRecv, Peer: g.sw, Group: g.id, From: uint16(from), Buf: buf, AtMost: true, done: make(chan struct{})}
	now := time.Now()
	if err := ep.core.Post(now, op); err != nil {
		return 0, false, err
	}
	ep.pumpLocked(now)
	if !op.finished {
		// Not reachable: the message was here whole.
		ep.core.Cancel(op)
		ep.pumpLocked(now)
		return 0, false, nil
	}
	return op.N, true, op.Err
}

// ReduceOptions tune one aggregation.
type ReduceOptions struct {
	// Deterministic reduces in member order at the switch, so float
	// results are bitwise identical from run to run.
	Deterministic bool
}

// StartAllreduce contributes send (elements of dt) and receives the
// element-wise reduction over all members into recv (same length) — one
// transmission each way. Every member must call the group's aggregations
// in the same order with the same length, dtype and op.
func (g *Group) StartAllreduce(send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) (*Op, error) {
	op := &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: -1, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic}
	if recv == nil {
		return nil, fmt.Errorf("%w: allreduce needs a receive buffer", ErrBadOp)
	}
	return op, g.ep.Start(op, nil)
}

// Allreduce is StartAllreduce and wait.
func (g *Group) Allreduce(ctx context.Context, send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) error {
	if recv == nil {
		return fmt.Errorf("%w: allreduce needs a receive buffer", ErrBadOp)
	}
	return g.ep.Do(ctx, &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: -1, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic})
}

// Reduce contributes send; the reduction lands in recv at member root only
// (other members pass recv nil and complete once the switch has their
// contribution).
func (g *Group) Reduce(ctx context.Context, root int, send, recv []byte, dt wire.Dtype, alu wire.Alu, opts ReduceOptions) error {
	if root < 0 || root >= len(g.members) {
		return fmt.Errorf("%w: root %d of %d members", ErrBadOp, root, len(g.members))
	}
	if root == int(g.rank) && recv == nil {
		return fmt.Errorf("%w: the root needs a receive buffer", ErrBadOp)
	}
	if root != int(g.rank) {
		recv = nil
	}
	return g.ep.Do(ctx, &Op{Kind: KindAggregate, Peer: g.sw, Group: g.id, Buf: send, Recv: recv, Root: root, Dtype: dt, Alu: alu, Deterministic: opts.Deterministic})
}

// Handler serves one anycast request: key is the request's affinity key.
// It returns the reply, or an error (sent as StatusBusy... use a
// wire.Status to choose the code).
type Handler func(key uint64, req []byte) ([]byte, error)

// Service is this endpoint's membership in an anycast service group.
type Service struct {
	ep      *Endpoint
	sw      netip.AddrPort
	id      uint32
	rank    uint16
	opts    FabricOptions
	handler Handler

	stop     chan struct{}
	stopOnce sync.Once
	hbDone   chan struct{}
}

// ServiceConfig describes a service group at its creation (by its first
// member to register).
type ServiceConfig struct {
	Name   string
	Size   int // members the service will have (their ids are 0..Size-1)
	Policy ctrl.Policy
	// Ranges is the ownership table for key affinity: keys in [Start, End)
	// go to Owner, or to its first live replica.
	Ranges []ctrl.KeyRange
}

// RegisterService makes this endpoint member rank (-1: any free id) of
// the service group, serving requests with h on a goroutine per request.
// At most Config.MaxIncoming requests are held at once (being received or
// handled): beyond that the core refuses new ones with StatusBusy, which
// their clients see, so at most MaxIncoming handlers run at once.
func (ep *Endpoint) RegisterService(ctx context.Context, sw string, sc ServiceConfig, rank int, h Handler, opts FabricOptions) (*Service, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	req := &ctrl.Msg{Type: ctrl.Register, Service: sc.Name, Size: sc.Size, Rank: rank, Policy: uint8(sc.Policy)}
	for _, r := range sc.Ranges {
		cr := ctrl.Range{Start: r.Start, End: r.End, Owner: int32(r.Owner)}
		for _, x := range r.Replicas {
			cr.Replicas = append(cr.Replicas, int32(x))
		}
		req.Ranges = append(req.Ranges, cr)
	}
	resp, err := ep.control(ctx, ap, req, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint: register %q: %w", sc.Name, err)
	}
	ep.mu.Lock()
	ep.core.SetMember(resp.Group, resp.Member)
	ep.core.SetGroupSwitch(resp.Group, ap)
	ep.mu.Unlock()
	s := &Service{ep: ep, sw: ap, id: resp.Group, rank: resp.Member, opts: opts, handler: h,
		stop: make(chan struct{}), hbDone: make(chan struct{})}
	ep.mu.Lock()
	ep.services[s.id] = s
	ep.mu.Unlock()
	ep.addCloser(s.stopHeartbeats)
	go s.heartbeats()
	return s, nil
}

// Rank is this member's id in the service group.
func (s *Service) Rank() int { return int(s.rank) }

func (s *Service) heartbeats() {
	g := &Group{ep: s.ep, sw: s.sw, id: s.id, rank: s.rank, opts: s.opts, stop: s.stop, hbDone: s.hbDone, service: true}
	g.heartbeats()
}

func (s *Service) stopHeartbeats() {
	s.stopOnce.Do(func() { close(s.stop) })
	<-s.hbDone
}

// Close stops serving: heartbeats stop, so the switch fails the service
// over to other members after its heartbeat timeout.
//
// A switch that restarted may have given this service's group id to
// another service this endpoint registered since: Close then leaves that
// one alone.
func (s *Service) Close() {
	s.stopHeartbeats()
	s.ep.mu.Lock()
	if s.ep.services[s.id] == s {
		delete(s.ep.services, s.id)
		s.ep.core.LeaveGroup(s.id)
	}
	s.ep.mu.Unlock()
}

// dispatchLocked hands completed anycast requests to their handlers.
// Caller holds mu.
func (ep *Endpoint) dispatchLocked() {
	for _, r := range ep.core.Requests() {
		s := ep.services[r.Group]
		if s == nil {
			_ = ep.core.Reply(r, nil, wire.StatusNotMember)
			continue
		}
		ep.handlers.Add(1)
		go func(r *Request) {
			defer ep.handlers.Done()
			data, err := s.handler(r.Key, r.Data)
			st := wire.StatusOK
			if err != nil {
				if !errors.As(err, &st) {
					st = wire.StatusBusy
				}
				data = nil
			}
			ep.mu.Lock()
			defer ep.mu.Unlock()
			if ep.closed {
				return
			}
			_ = ep.core.Reply(r, data, st)
			ep.pumpLocked(time.Now())
		}(r)
	}
}

// Anycast sends req to one member of service group (as chosen by the
// switch's policy; key selects the owner under key affinity) and returns
// the reply.
func (ep *Endpoint) Anycast(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions) ([]byte, error) {
	op, err := ep.anycastOp(ctx, sw, service, key, req, opts)
	if err != nil {
		return nil, err
	}
	if err := ep.Do(ctx, op); err != nil {
		return nil, err
	}
	return op.Resp, nil
}

// StartAnycast is Anycast's asynchronous form: the reply is in op.Resp
// once op.Done() is closed (the service name is resolved first, within
// ctx, and cached).
func (ep *Endpoint) StartAnycast(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions, notify chan<- *Op) (*Op, error) {
	op, err := ep.anycastOp(ctx, sw, service, key, req, opts)
	if err != nil {
		return nil, err
	}
	return op, ep.Start(op, notify)
}

func (ep *Endpoint) anycastOp(ctx context.Context, sw string, service string, key uint64, req []byte, opts FabricOptions) (*Op, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	id, err := ep.lookup(ctx, ap, service, opts)
	if err != nil {
		return nil, err
	}
	return &Op{Kind: KindAnycast, Peer: ap, Group: id, Addr: key, Buf: req}, nil
}

// lookup resolves a service name to its group id (cached).
func (ep *Endpoint) lookup(ctx context.Context, sw netip.AddrPort, service string, opts FabricOptions) (uint32, error) {
	ep.mu.Lock()
	id, ok := ep.svcIDs[service]
	ep.mu.Unlock()
	if ok {
		return id, nil
	}
	resp, err := ep.control(ctx, sw, &ctrl.Msg{Type: ctrl.Lookup, Service: service}, &opts)
	if err != nil {
		return 0, fmt.Errorf("endpoint: lookup %q: %w", service, err)
	}
	ep.mu.Lock()
	ep.svcIDs[service] = resp.Group
	ep.mu.Unlock()
	return resp.Group, nil
}

// ServiceMembers asks the switch for service group service's live
// members (id and address), fresh each call: the switch's soft state of
// who serves it.
func (ep *Endpoint) ServiceMembers(ctx context.Context, sw string, service string, opts FabricOptions) ([]ctrl.MemberInfo, error) {
	ap, err := parseSwitch(sw)
	if err != nil {
		return nil, err
	}
	ep.enableGroups()
	resp, err := ep.control(ctx, ap, &ctrl.Msg{Type: ctrl.Lookup, Service: service}, &opts)
	if err != nil {
		return nil, fmt.Errorf("endpoint: lookup %q: %w", service, err)
	}
	ep.mu.Lock()
	ep.svcIDs[service] = resp.Group
	ep.mu.Unlock()
	return resp.Members, nil
}

// humanBytes writes n bytes with a binary unit (KiB, MiB, GiB, TiB).
func humanBytes(n uint64) string {
	units := []string{"bytes", "KiB", "MiB", "GiB", "TiB"}
	v, u := float64(n), 0
	for v >= 1024 && u < len(units)-1 {
		v /= 1024
		u++
	}
	if u == 0 {
		return fmt.Sprintf("%d bytes", n)
	}
	return fmt.Sprintf("%.1f %s", v, units[u])
}
