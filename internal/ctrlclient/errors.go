package ctrlclient

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
	"github.com/ndma/ndma/wire/ctrl"
)

// Options configure how a client (an endpoint, a memory node) talks to a
// forwarding node; the host library calls them endpoint.FabricOptions.
type Options struct {
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

// HeartbeatInterval is Heartbeat, or its default.
func (o *Options) HeartbeatInterval() time.Duration {
	if o.Heartbeat > 0 {
		return o.Heartbeat
	}
	return 250 * time.Millisecond
}

// ErrControl wraps a control exchange the switch refused or answered
// with something unexpected.
var ErrControl = errors.New("endpoint: control exchange failed")

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
		return fmt.Sprintf("the switch at %v took the request but sent no answer in %v", e.Switch, RoundWait(e.Wait))
	}
	msg := fmt.Sprintf("no switch answers at %v after %v", e.Switch, RoundWait(e.Wait))
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

// RoundWait rounds a wait for a message: to 10ms below a second, to
// 100ms above.
func RoundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// CtxErr is ctx's error, or context.DeadlineExceeded once its deadline
// has passed although ctx has not noticed yet (the op's own timer, set
// from the deadline, may fire first).
func CtxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return context.DeadlineExceeded
	}
	return nil
}

// WaitedSince is how long an exchange begun at start waited: up to ctx's
// deadline if that has passed, else until now.
func WaitedSince(ctx context.Context, start time.Time) time.Duration {
	if dl, ok := ctx.Deadline(); ok && !time.Now().Before(dl) {
		return dl.Sub(start)
	}
	return time.Since(start)
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

// Explain adds what the switch said in Operand1 (operand) to a
// refused Join, Register, Lookup or PoolCreate.
func Explain(req *ctrl.Msg, err error, operand uint64) error {
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

// NoAnswer returns a *NoAnswerError for a control request to sw that
// failed with err because no answer came in time: its own timeout ran
// out (timedOut), the transport gave up on the switch, or ctx's deadline
// passed. For any other failure (a refusal, a cancellation) it returns
// nil. acked says the switch acknowledged the request; wait is how long
// it waited.
func NoAnswer(ctx context.Context, sw netip.AddrPort, acked, timedOut bool, err error, wait time.Duration) *NoAnswerError {
	cerr := CtxErr(ctx)
	if !timedOut && !errors.Is(err, transport.ErrPeerDead) && cerr != context.DeadlineExceeded {
		return nil
	}
	if cerr != nil && !errors.Is(err, cerr) {
		err = errors.Join(err, cerr)
	}
	return &NoAnswerError{Switch: sw, Wait: wait, Acked: acked, Err: err}
}
