package endpoint

import (
	"context"
	"errors"
	"net/netip"
	"time"

	"github.com/ndma/ndma/internal/ctrlclient"
	"github.com/ndma/ndma/wire/ctrl"
)

// FabricOptions configure how an endpoint talks to a forwarding node:
// Token authenticates control messages (it must match the switch's, and
// must not be empty unless Insecure is set: an empty Token is refused
// without it, every control call failing with an error wrapping
// secure.ErrNoToken), and Heartbeat is the interval between heartbeats
// to the switch (zero means 250ms; keep it at a quarter of the switch's
// --heartbeat-timeout).
type FabricOptions = ctrlclient.Options

// ErrControl wraps a control exchange the switch refused or answered
// with something unexpected.
var ErrControl = ctrlclient.ErrControl

// ErrRankTaken is JoinJob's error when another process (another address)
// already joined the job with the rank asked for.
var ErrRankTaken = errors.New("endpoint: rank taken")

// ErrNoSwitch is matched (errors.Is) by a control exchange's error when
// nothing came back from the switch's address: no acknowledgement of the
// request, no answer. See NoAnswerError.
var ErrNoSwitch = ctrlclient.ErrNoSwitch

// NoAnswerError is a control exchange's error when the switch sent no
// answer in time: the context's deadline passed, the op's timeout
// (Config.OpTimeout) ran out, or the transport gave up on the request.
// It matches ErrNoSwitch when the switch did not even acknowledge the
// request, and whatever its cause matches (ErrTimeout, a
// *transport.PeerError, context.DeadlineExceeded).
type NoAnswerError = ctrlclient.NoAnswerError

// UnsealedHint ends a NoAnswerError's message when the endpoint seals
// nothing: a switch that requires sealed datagrams drops its requests
// without a word.
const UnsealedHint = ctrlclient.UnsealedHint

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
	return ctrlclient.Exchange(ctx, (*ctrlTransport)(ep), sw, req, opts, ep.MTU(), ep.sec == nil)
}

// ctrlTransport is the Endpoint as the control client's Transport: a
// request is a KindControl op.
type ctrlTransport Endpoint

func (t *ctrlTransport) Do(ctx context.Context, sw netip.AddrPort, msg []byte) ctrlclient.Result {
	ep := (*Endpoint)(t)
	op := &Op{Kind: KindControl, Peer: sw, Buf: msg}
	err := ep.Do(ctx, op)
	return ctrlclient.Result{Resp: op.Resp, Operand: op.Old, Acked: op.acked, TimedOut: errors.Is(err, ErrTimeout), Closed: errors.Is(err, ErrClosed), Err: err}
}

// RecoveringError is a pool request the switch refused because it is
// rebuilding its map of the pool from the memory nodes (it restarted):
// it asks again after Wait. The pool calls wait it out themselves, within
// their context.
type RecoveringError = ctrlclient.RecoveringError

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
