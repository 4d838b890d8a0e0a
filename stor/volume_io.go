package stor

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/ndma/ndma/endpoint"
	"github.com/ndma/ndma/transport"
	"github.com/ndma/ndma/wire"
)

// pieces splits [off, off+n) at extent boundaries and MaxIO.
func (v *Volume) pieces(off int64, n int, f func(e int, off uint64, lo, hi int)) {
	pos := 0
	for pos < n {
		o := uint64(off) + uint64(pos)
		e := int(o / v.d.Extent)
		end := min(uint64(e+1)*v.d.Extent, o+uint64(n-pos), o+MaxIO)
		l := int(end - o)
		f(e, o, pos, pos+l)
		pos += l
	}
}

func (v *Volume) checkRange(off int64, n int) error {
	if off < 0 || uint64(off) > v.d.Size || uint64(n) > v.d.Size-uint64(off) {
		return fmt.Errorf("%w: %d bytes at %d of volume %s (%d bytes)", ErrOutOfRange, n, off, v.d.Name, v.d.Size)
	}
	return nil
}

// WriteAt writes p at off: each piece (within one extent, at most MaxIO)
// is one multicast to the extent's replica group. A write that fails
// because the groups changed under it (a replica died, the switch
// restarted) is sent again, after the groups are formed anew, for up to
// RetryFor.
func (v *Volume) WriteAt(p []byte, off int64) (int, error) {
	if !v.write {
		return 0, ErrReadOnly
	}
	if err := v.checkRange(off, len(p)); err != nil {
		return 0, err
	}
	ctx := v.c.gated(context.Background())
	return retryIO(ctx, v, "write", func() (int, error) { return v.writeOnce(ctx, p, off) })
}

// RetryFor bounds how long a read, write or flush is retried while the
// fabric recovers from a failure (a storage node or the switch
// restarting), as a disk's driver retries a command before it fails it.
const RetryFor = 30 * time.Second

// retryable reports whether err may pass once the groups are formed again
// or a replica returns: a group member (or this writer) counted dead, a
// group or service the switch forgot, no current replica up, a timeout.
func retryable(err error) bool {
	var me *endpoint.MemberError
	return errors.As(err, &me) || errors.Is(err, wire.StatusNotMember) || errors.Is(err, wire.StatusMemberDead) ||
		errors.Is(err, ErrNoReplica) || errors.Is(err, ErrNotCurrent) || errors.Is(err, ErrNotReady) ||
		errors.Is(err, endpoint.ErrTimeout) || errors.Is(err, errReform) || errors.Is(err, ErrWrongNode) ||
		errors.Is(err, transport.ErrPeerDead)
}

// retryIO runs f until it succeeds, fails for good, or RetryFor passes;
// between tries of a writer, the groups are formed again. ctx carries the
// gate of the goroutine (Client.gated).
func retryIO(ctx context.Context, v *Volume, what string, f func() (int, error)) (int, error) {
	deadline := time.Now().Add(RetryFor)
	wait := 50 * time.Millisecond
	for try := 0; ; try++ {
		n, err := f()
		if err == nil || !retryable(err) || time.Now().After(deadline) {
			if err != nil && try > 0 {
				v.log.Warn("stor: I/O failed", "volume", v.d.Name, "op", what, "tries", try+1, "err", err)
			}
			return n, err
		}
		if try == 0 {
			v.log.Info("stor: I/O failed, retrying", "volume", v.d.Name, "op", what, "err", err)
		}
		time.Sleep(wait)
		passGate(ctx)
		wait = min(2*wait, time.Second)
		if v.ctrl != "" && (staleService(err) || silentService(err)) {
			// The switch restarted: look the gateway up again.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), nodeCallTimeout)
			_, _ = v.c.ep.ServiceMembers(ctx, v.c.sw, v.ctrl, v.c.opts.Fabric)
			passGate(ctx)
			cancel()
		}
		if v.write && v.ctrl == "" {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			v.lockForm()
			passGate(ctx)
			v.reform = true
			if ferr := v.formLocked(ctx); ferr != nil {
				v.log.Debug("stor: forming the write groups", "volume", v.d.Name, "err", ferr)
			}
			v.unlockForm()
			cancel()
		}
	}
}

func (v *Volume) writeOnce(ctx context.Context, p []byte, off int64) (int, error) {
	v.verMu.Lock()
	lost := v.lost
	v.verMu.Unlock()
	if lost != nil {
		return 0, lost
	}
	v.io.enter()
	passGate(ctx)
	defer v.io.leave()
	type piece struct {
		op  *endpoint.Op
		e   int
		ver uint64
		req []byte // controller mode: the request, to send again
		n   int    // controller mode: its data bytes, held in Client.inflight
	}
	var (
		inflight []piece
		firstErr error
	)
	wait := func(pc piece) {
		<-pc.op.Done()
		passGate(ctx)
		err := pc.op.Err
		if (errors.Is(err, wire.StatusBusy) || errors.Is(err, wire.StatusMemberDead)) && v.ctrl != "" {
			// The gateway or the switch is out of room: again, with
			// backoff.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			pc.op.Resp, err = retryBusy(ctx, v.c.draws, true, func() ([]byte, error) {
				return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, pc.req, v.c.opts.Fabric)
			})
			cancel()
		}
		if v.ctrl != "" {
			v.c.inflight.Release(int64(pc.n))
			if err == nil {
				_, err = replyBody(-1, "write", pc.op.Resp)
			}
		}
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("stor: volume %s: write: %w", v.d.Name, err))
			return
		}
		v.verMu.Lock()
		v.lastVer[pc.e] = max(v.lastVer[pc.e], pc.ver)
		v.verMu.Unlock()
	}
	v.pieces(off, len(p), func(e int, o uint64, lo, hi int) {
		if firstErr != nil {
			return
		}
		v.verMu.Lock()
		v.ctr++
		pc := piece{e: e, ver: v.epoch<<32 | v.ctr}
		v.verMu.Unlock()
		var err error
		if v.ctrl != "" {
			pc.op, pc.req, pc.n, err = v.startGateway(ctx, pc.ver, o, p[lo:hi])
		} else {
			pc.op, err = v.startMulticast(e, pc.ver, o, p[lo:hi])
		}
		if err != nil {
			firstErr = err
			return
		}
		inflight = append(inflight, pc)
		if len(inflight) >= v.c.opts.Window {
			wait(inflight[0])
			inflight = inflight[1:]
		}
	})
	for _, pc := range inflight {
		wait(pc)
	}
	if firstErr != nil {
		return 0, firstErr
	}
	return len(p), nil
}

// startMulticast sends one write piece (version ver, at off) as one
// multicast to extent e's replica group.
func (v *Volume) startMulticast(e int, ver, off uint64, data []byte) (*endpoint.Op, error) {
	v.mu.Lock()
	g := v.groups[setName(v.c.opts.Service, v.d.SetOf(e))]
	v.mu.Unlock()
	if g == nil {
		return nil, fmt.Errorf("%w: every replica of extent %d (nodes %v) is down", ErrNoReplica, e, v.d.Replica(e))
	}
	if err := g.gone(); err != nil {
		return nil, fmt.Errorf("stor: volume %s: write: %w", v.d.Name, err)
	}
	msg := appendWrite(make([]byte, 0, writeHdr+len(data)), ver, off, data)
	// Not MulticastOptions.Continue: a write that a member of the group
	// died before taking fails, and is sent again once the groups are
	// formed anew (in a generation that counts that member out), so that
	// every member a generation counts current holds every write that
	// completed. (One that completed without a member that came back
	// unnoticed would be missing on a copy counted current.)
	return g.g.StartMulticast(msg, endpoint.MulticastOptions{})
}

// startGateway sends one write piece to the gateway (controller mode),
// holding its bytes in Client.inflight once per replica (what the
// gateway's link carries for it); it returns the request, to send again,
// and the bytes held.
func (v *Volume) startGateway(ctx context.Context, ver, off uint64, data []byte) (*endpoint.Op, []byte, int, error) {
	req := (&oneReq{Name: v.d.Name, Holder: v.holder, Ver: ver, Off: off, Data: data}).append(nil, opGwWrite)
	n := int(min(int64(len(data))*int64(max(v.d.Replicas, 1)), v.c.inflightLimit))
	err := v.c.inflight.Acquire(context.Background(), int64(n))
	passGate(ctx)
	if err != nil {
		return nil, nil, 0, err
	}
	op, err := v.c.ep.StartAnycast(context.Background(), v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric, nil)
	if err != nil {
		v.c.inflight.Release(int64(n))
		return nil, nil, 0, err
	}
	return op, req, n, nil
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// flushSlots is the aggregation a flush ends with: slot 0 counts the
// replicas that answered, slot c those that answered code c.
const flushSlots = 16

// Flush makes every completed write durable on every live replica (each
// fdatasyncs), and reports a write a replica could not apply (a full
// disk, an I/O error). A replica found dead is dropped from the groups
// (the volume is degraded) and the flush is retried on the others; so is
// a flush whose groups the switch forgot (it restarted), for up to
// RetryFor.
func (v *Volume) Flush() error {
	if !v.write {
		return nil
	}
	ctx, cancel := context.WithTimeout(v.c.gated(context.Background()), time.Minute)
	defer cancel()
	_, err := retryIO(ctx, v, "flush", func() (int, error) {
		if v.ctrl == "" {
			return 0, v.flushOnce(ctx)
		}
		req := (&oneReq{Name: v.d.Name, Holder: v.holder}).append(nil, opGwFlush)
		resp, err := retryBusy(ctx, v.c.draws, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric) })
		if err == nil {
			_, err = replyBody(-1, "flush", resp)
		}
		return 0, err
	})
	return err
}

var errReform = errors.New("stor: write groups changed")

func (v *Volume) flushOnce(ctx context.Context) error {
	// One flush at a time: a node answers each flush message with its
	// part of one aggregation, and the switch pairs the aggregations in
	// order, so two flushes at once could each take the other's answer,
	// given before the node applied the writes it was meant to cover.
	select {
	case v.flushing <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	}
	passGate(ctx)
	defer func() { <-v.flushing }()
	v.io.enter()
	passGate(ctx)
	defer v.io.leave()
	gs := v.groupList()
	if len(gs) < len(v.d.Sets()) {
		return fmt.Errorf("%w: some extents of volume %s have every replica down", ErrNoReplica, v.d.Name)
	}
	errs := make([]error, len(gs))
	v.c.forEach(ctx, len(gs), func(ctx context.Context, i int) {
		g := gs[i]
		if err := g.gone(); err != nil {
			errs[i] = err
			return
		}
		err := g.g.Multicast(ctx, []byte{opFlush}, endpoint.MulticastOptions{})
		passGate(ctx)
		if err != nil {
			errs[i] = err
			return
		}
		var send, res [8 * flushSlots]byte
		err = g.g.Allreduce(ctx, send[:], res[:], wire.DtypeI64, wire.AluAdd, endpoint.ReduceOptions{})
		passGate(ctx)
		if err != nil {
			errs[i] = err
			return
		}
		n := binary.LittleEndian.Uint64(res[:])
		if n < uint64(len(g.members)) {
			errs[i] = errReform
			return
		}
		for c := 1; c < flushSlots; c++ {
			if k := binary.LittleEndian.Uint64(res[8*c:]); k > 0 {
				errs[i] = &NodeError{Node: -1, Op: "flush", Code: Code(c), Msg: fmt.Sprintf("%d of %d replicas of nodes %v failed a write", k, n, g.members)}
				return
			}
		}
	})
	return errors.Join(errs...)
}

// ReadAt reads len(p) bytes at off: each piece from one replica, as the
// switch picks among the live ones; a replica that cannot serve it (being
// resynced, or behind this client's own writes) is skipped for another.
func (v *Volume) ReadAt(p []byte, off int64) (int, error) {
	if err := v.checkRange(off, len(p)); err != nil {
		return 0, err
	}
	ctx, cancel := context.WithTimeout(v.c.gated(context.Background()), time.Minute)
	defer cancel()
	type piece struct {
		e      int
		off    uint64
		lo, hi int
	}
	var ps []piece
	v.pieces(off, len(p), func(e int, o uint64, lo, hi int) { ps = append(ps, piece{e, o, lo, hi}) })
	if len(ps) == 1 {
		return len(p), v.readPiece(ctx, ps[0].e, ps[0].off, p)
	}
	errs := make([]error, len(ps))
	sem := make(chan struct{}, v.c.opts.Window)
	var wg sync.WaitGroup
	for i, pc := range ps {
		sem <- struct{}{}
		passGate(ctx)
		pctx := v.c.gated(ctx)
		wg.Add(1)
		go func() {
			defer wg.Done()
			passGate(pctx)
			errs[i] = v.readPiece(pctx, pc.e, pc.off, p[pc.lo:pc.hi])
			<-sem
		}()
	}
	wg.Wait()
	passGate(ctx)
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	return len(p), nil
}

// readPiece reads one piece, retrying for up to RetryFor while no replica
// can serve it (every one down, resyncing or behind, the switch
// restarting).
func (v *Volume) readPiece(ctx context.Context, e int, off uint64, buf []byte) error {
	_, err := retryIO(ctx, v, "read", func() (int, error) { return 0, v.readPieceOnce(ctx, e, off, buf) })
	return err
}

func (v *Volume) readPieceOnce(ctx context.Context, e int, off uint64, buf []byte) error {
	err := v.c.inflight.Acquire(ctx, int64(len(buf)))
	passGate(ctx)
	if err != nil {
		return err
	}
	defer v.c.inflight.Release(int64(len(buf)))
	v.verMu.Lock()
	minVer := v.lastVer[e]
	v.verMu.Unlock()
	req := (&readReq{Name: v.d.Name, Off: off, Len: uint32(len(buf)), MinVer: minVer}).append(nil)
	var resp []byte
	if v.ctrl != "" {
		resp, err = retryBusy(ctx, v.c.draws, true, func() ([]byte, error) { return v.c.ep.Anycast(ctx, v.c.sw, v.ctrl, gatewayKey, req, v.c.opts.Fabric) })
	} else {
		resp, err = readExtent(ctx, v.c, v.d, e, req)
	}
	if err != nil {
		return err
	}
	body, err := replyBody(-1, "read", resp)
	if err != nil {
		return err
	}
	return copyRead(buf, body)
}

// readExtent sends read request req for extent e of volume d to one of its
// replicas, as the switch picks (anycast to the replica set); if that one
// cannot serve it (being resynced, or behind the writer), to each replica
// in turn. It returns the reply, code first.
func readExtent(ctx context.Context, c *Client, d Descriptor, e int, req []byte) ([]byte, error) {
	set := setName(c.opts.Service, d.SetOf(e))
	anycast := func() ([]byte, error) {
		// A try is bounded, so that a request a restarted switch drops
		// (a cached group id that names no service now) is looked up
		// again in time.
		actx, cancel := context.WithTimeout(ctx, nodeCopyTimeout)
		defer cancel()
		return retryBusy(actx, c.draws, true, func() ([]byte, error) { return c.ep.Anycast(actx, c.sw, set, 0, req, c.opts.Fabric) })
	}
	resp, err := anycast()
	if (errors.Is(err, wire.StatusNotMember) || silentService(err)) && ctx.Err() == nil {
		// The switch restarted: look the set up again.
		_, lerr := c.ep.ServiceMembers(ctx, c.sw, set, c.opts.Fabric)
		passGate(ctx)
		if lerr == nil {
			resp, err = anycast()
		}
	}
	if err == nil {
		_, err = replyBody(-1, "read", resp)
		if err == nil || !errors.Is(err, ErrNotReady) && !errors.Is(err, ErrNoVolume) {
			return resp, nil
		}
	}
	// The replica the switch chose could not serve it: ask each in turn.
	for _, id := range d.Replica(e) {
		body, rerr := c.call(ctx, id, "read", req)
		if rerr == nil {
			return append([]byte{byte(CodeOK)}, body...), nil
		}
		err = rerr
	}
	return nil, fmt.Errorf("%w: volume %s extent %d: %v", ErrNoReplica, d.Name, e, err)
}

func copyRead(buf, body []byte) error {
	if len(body) != 8+len(buf) {
		return fmt.Errorf("%w: read answered %d bytes, want %d", ErrIO, len(body)-8, len(buf))
	}
	copy(buf, body[8:])
	return nil
}
