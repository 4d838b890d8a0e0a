package ctrlclient

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/ndma/ndma/wire/ctrl"
)

// Lender is a memory node as Lend and Leave use it.
type Lender interface {
	// Control sends req to the switch sw and returns its answer
	// (Exchange over the node's transport).
	Control(ctx context.Context, sw netip.AddrPort, req *ctrl.Msg, opts *Options) (*ctrl.Msg, error)
	// Send sends the encoded control request msg to sw and waits, within
	// ctx, for it to be answered.
	Send(ctx context.Context, sw netip.AddrPort, msg []byte) error
	// Reports returns the node's report of its grants for switch
	// incarnation switchInc (memnode/server's Server.PoolReports), and
	// Reported records that the switch has it.
	Reports(switchInc uint64) ([][]byte, error)
	Reported(switchInc uint64)
	// Kept reports whether the node kept its memory and grants from an
	// earlier start (a durable node: memnode/server's Server.PoolKept);
	// its offers say so.
	Kept() bool
	// Closed reports whether err says the node closed.
	Closed(err error) bool
}

// Leave tells the switch sw that the memory node l, of incarnation inc,
// lending region key, stops lending (it shuts down): the switch counts
// it dead at once instead of after its heartbeat timeout, and forgets it
// if it holds no region copies. Cancel the Lend context first, or its
// heartbeat registers the node again.
func Leave(ctx context.Context, l Lender, sw netip.AddrPort, key, inc uint64, opts Options) error {
	if _, err := l.Control(ctx, sw, &ctrl.Msg{Type: ctrl.PoolNode, Key: key, Epoch: inc}, &opts); err != nil {
		return fmt.Errorf("pool leave: %w", err)
	}
	return nil
}

// Lend offers capacity bytes of the memory node l's region key to the
// pool of the switch sw, as incarnation inc, and keeps offering it (the
// offer is the node's heartbeat) every opts' heartbeat interval until
// ctx ends or the node closes, in a goroutine. It returns the node id
// once the first offer is accepted, or its error (the first offer waits
// at most four intervals). Whenever the switch answers as an
// incarnation the node has not reported to (it started, or restarted),
// the node reports the grants it holds (ctrl.PoolReport), so that the
// switch rebuilds its map of the pool. log (not nil) takes the failures
// of later offers, at debug level.
func Lend(ctx context.Context, l Lender, log *slog.Logger, sw netip.AddrPort, key, capacity, inc uint64, opts Options) (uint16, error) {
	if capacity == 0 {
		return 0, fmt.Errorf("pool lend: capacity 0 (Leave stops lending)")
	}
	req := &ctrl.Msg{Type: ctrl.PoolNode, Key: key, Capacity: capacity, Epoch: inc, Kept: l.Kept()}
	iv := opts.HeartbeatInterval()
	cctx, cancel := context.WithTimeout(ctx, 4*iv) // one heartbeat timeout
	resp, err := l.Control(cctx, sw, req, &opts)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("pool lend: %w", err)
	}
	if err := report(ctx, l, log, sw, resp.Epoch, 2*iv); err != nil {
		log.Debug("pool report", "switch", sw, "err", err)
	}
	go func() {
		t := time.NewTicker(iv)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			cctx, cancel := context.WithTimeout(ctx, 2*iv)
			resp, err := l.Control(cctx, sw, req, &opts)
			cancel()
			if l.Closed(err) {
				return
			}
			if err == nil {
				err = report(ctx, l, log, sw, resp.Epoch, 2*iv)
			}
			if err != nil && ctx.Err() == nil {
				log.Debug("pool lend", "switch", sw, "err", err)
			}
		}
	}()
	return resp.Node, nil
}

// report sends the switch incarnation switchInc the node's report of its
// grants, if it has not had it, each message waiting at most wait for
// its answer; the next heartbeat tries again after a failure.
func report(ctx context.Context, l Lender, log *slog.Logger, sw netip.AddrPort, switchInc uint64, wait time.Duration) error {
	msgs, err := l.Reports(switchInc)
	if err != nil || len(msgs) == 0 {
		return err
	}
	for _, b := range msgs {
		cctx, cancel := context.WithTimeout(ctx, wait)
		err := l.Send(cctx, sw, b)
		cancel()
		if err != nil {
			return err
		}
	}
	l.Reported(switchInc)
	log.Info("reported this memory node's pool regions to the switch", "switch", sw, "messages", len(msgs))
	return nil
}
