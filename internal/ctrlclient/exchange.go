package ctrlclient

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/ndma/ndma/secure"
	"github.com/ndma/ndma/wire/ctrl"
)

// Result is how one control request ended.
type Result struct {
	Resp    []byte // the answer's payload
	Operand uint64 // the answer's Operand1: what a refusal means (see Explain)
	// Acked: the switch acknowledged the whole request.
	Acked bool
	// TimedOut: Err is the request's own timeout running out.
	TimedOut bool
	// Closed: Err is the client closing; nothing is explained.
	Closed bool
	Err    error // nil, a wire.Status refusal, or why no answer came
}

// Transport sends one encoded control request and waits for its answer.
type Transport interface {
	// Do sends msg to the switch sw and waits, within ctx, for its
	// answer.
	Do(ctx context.Context, sw netip.AddrPort, msg []byte) Result
}

// Exchange sends req to the switch sw over t and returns its answer. A
// request that gets no answer in time fails with a *NoAnswerError
// (Unsealed set from unsealed: the client runs without a security
// layer); a refusal is explained (Explain). Join, Register and Lookup
// requests carry mtu, the client's MTU. An opts without a Token and
// without Insecure fails before anything is sent, with an error wrapping
// secure.ErrNoToken.
func Exchange(ctx context.Context, t Transport, sw netip.AddrPort, req *ctrl.Msg, opts *Options, mtu int, unsealed bool) (*ctrl.Msg, error) {
	if err := secure.CheckToken(opts.Token, opts.Insecure); err != nil {
		return nil, fmt.Errorf("%v to %v: FabricOptions.Token: %w", req.Type, sw, err)
	}
	token := opts.Token
	if req.Type.CarriesMTU() {
		req.MTU = mtu
	}
	buf, err := secure.AppendCtrl(nil, req, token)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	r := t.Do(ctx, sw, buf)
	if r.Err != nil {
		if !r.Closed {
			if na := NoAnswer(ctx, sw, r.Acked, r.TimedOut, r.Err, WaitedSince(ctx, start)); na != nil {
				na.Unsealed = unsealed
				return nil, na
			}
		}
		return nil, Explain(req, r.Err, r.Operand)
	}
	resp := &ctrl.Msg{}
	if err := secure.ParseCtrl(r.Resp, resp, token); err != nil {
		return nil, fmt.Errorf("%w: %v response: %w", ErrControl, req.Type, err)
	}
	if !resp.Resp || resp.Type != req.Type {
		return nil, fmt.Errorf("%w: %v answered with %v", ErrControl, req.Type, resp.Type)
	}
	return resp, nil
}
