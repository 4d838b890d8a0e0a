package coll

import (
	"context"
	"slices"

	"github.com/ndma/ndma/reduce"
	"github.com/ndma/ndma/wire"
)

// The two-level collectives (see hier.go). Inside a host they move data
// in phases through the segment, shmChunk bytes per rank at a time; a
// phase ends when every local rank has done its part (hierarchy.sync).
// A reduction is done by all local ranks at once, each on its slice of
// the elements, combining the ranks' inputs in local rank order
// (x0 ⊕ x1) ⊕ x2 …; between hosts the leaders reduce the hosts' results
// with the call's algorithm on their communicator, so a result's order
// is fixed by the layout, the algorithm and the length, as for the flat
// algorithms (see Reduction order), and with WithDeterministic the same
// holds for the in-network step.
//
// Result regions are used in turn (chunk counter): a phase writes the
// next region while other ranks may still read the previous one.

// hierPlan reserves the call's turn now, in call order, and plans f to
// run in it.
func (c *Communicator) hierPlan(f func(ctx context.Context, h *hierarchy) error) callPlan {
	h := c.hier
	prev, mine, err := h.turn()
	if err != nil {
		return callPlan{err: err}
	}
	return callPlan{host: func(ctx context.Context) error {
		return h.run(ctx, prev, mine, func(ctx context.Context) error { return f(ctx, h) })
	}}
}

// chunkRange is chunk k of n bytes.
func chunkRange(k, n int) (lo, hi int) { return k * shmChunk, min(n, (k+1)*shmChunk) }

func chunks(n int) int { return (n + shmChunk - 1) / shmChunk }

// localIndex is the index of world rank r among this host's ranks, or
// -1.
func (h *hierarchy) localIndex(r int) int { return slices.Index(h.local, r) }

// localReduce reduces in (n bytes of dt) over the host's ranks into out
// at local rank collector, or at every local rank when collector is −1.
// code, the call's argument code, is checked in the first phase. done,
// if not nil, is called at a collector once chunk k is in out.
func (h *hierarchy) localReduce(ctx context.Context, in, out []byte, dt wire.Dtype, op ReduceOp, collector int, code uint64, done func(k int)) error {
	n, es, L := len(in), dt.Size(), len(h.local)
	collect := collector < 0 || collector == h.me
	base, nch := h.chunk, chunks(n)
	copyOut := func(k int) {
		lo, hi := chunkRange(k, n)
		copy(out[lo:hi], h.seg.result(base+uint64(k)))
		if done != nil {
			done(k)
		}
	}
	for k := range nch {
		lo, hi := chunkRange(k, n)
		work := func() {
			copy(h.seg.slot(h.me), in[lo:hi])
			if k > 0 && collect {
				copyOut(k - 1)
			}
		}
		var err error
		if k == 0 {
			err = h.checkArgs(ctx, code, work)
		} else {
			work()
			err = h.sync(ctx)
		}
		if err != nil {
			return err
		}
		e := (hi - lo) / es
		a, b := h.me*e/L*es, (h.me+1)*e/L*es
		dst := h.seg.result(base + uint64(k))[a:b]
		copy(dst, h.seg.slot(0)[a:b])
		for j := 1; j < L; j++ {
			reduce.Apply(dst, h.seg.slot(j)[a:b], dt, op)
		}
		if err := h.sync(ctx); err != nil {
			return err
		}
	}
	h.chunk += uint64(nch)
	if collect {
		copyOut(nch - 1)
	}
	return nil
}

// localBcast copies n bytes from buf at local rank src into buf at the
// other local ranks (only those that want it copy; the others take part
// in the phases). code, when not 0, is checked in the first phase.
// ready, if not nil, is called at src before chunk k is read from buf.
func (h *hierarchy) localBcast(ctx context.Context, buf []byte, n, src int, code uint64, want bool, ready func(k int) error) error {
	base, nch := h.chunk, chunks(n)
	copyOut := func(k int) {
		if want && h.me != src {
			lo, hi := chunkRange(k, n)
			copy(buf[lo:hi], h.seg.result(base+uint64(k)))
		}
	}
	for k := range nch {
		if ready != nil && h.me == src {
			if err := ready(k); err != nil {
				return err
			}
		}
		work := func() {
			if h.me == src {
				lo, hi := chunkRange(k, n)
				copy(h.seg.result(base+uint64(k)), buf[lo:hi])
			} else if k > 0 {
				copyOut(k - 1)
			}
		}
		var err error
		if k == 0 && code != 0 {
			err = h.checkArgs(ctx, code, work)
		} else {
			work()
			err = h.sync(ctx)
		}
		if err != nil {
			return err
		}
	}
	h.chunk += uint64(nch)
	copyOut(nch - 1)
	return nil
}

// allreduce: the host's ranks reduce into the leader (into every rank on
// one host), the leaders allreduce, each leader hands the result to its
// host; the leader's step is pipelined with its host's (leaderPiece).
func (h *hierarchy) allreduce(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts []CallOption) error {
	in := send
	if in == nil {
		in = recv
	}
	code := argCode(OpAllreduce, len(recv), int(dt), int(op))
	switch {
	case h.hosts == 1:
		return h.localReduce(ctx, in, recv, dt, op, -1, code, nil)
	case h.me == 0:
		return h.between(ctx, func(ctx context.Context) error {
			return h.allreduceLeader(ctx, in, recv, dt, op, opts, code)
		})
	}
	if err := h.localReduce(ctx, in, recv, dt, op, 0, code, nil); err != nil {
		return err
	}
	return h.localBcast(ctx, recv, len(recv), 0, 0, true, nil)
}

// Pipelining of a leader's Allreduce: the leaders reduce pieces of
// leaderPiece chunks as soon as the host has reduced them, at most
// leaderWindow pieces at a time, while the host reduces the next
// chunks; the leader hands a piece to its host as soon as the leaders
// have reduced it.
const (
	leaderPiece  = 4
	leaderWindow = 4
)

// allreduceLeader is a host leader's part of a two-level Allreduce
// between hosts (see leaderPiece).
func (h *hierarchy) allreduceLeader(ctx context.Context, in, recv []byte, dt wire.Dtype, op ReduceOp, opts []CallOption, code uint64) error {
	n, nch := len(recv), chunks(len(recv))
	pctx, cancel := context.WithCancel(ctx)
	var reqs []*Request
	defer func() {
		// Every piece posted ends before recv is handed back.
		cancel()
		for _, r := range reqs {
			r.Wait(context.Background())
		}
	}()
	wait := func(p int) error { return h.fromLeaders(reqs[p].Wait(ctx)) }
	var postErr error
	h.stepped = false // until a piece is posted, the other leaders wait for none
	post := func(p int) {
		if p >= leaderWindow && postErr == nil {
			postErr = wait(p - leaderWindow)
		}
		if postErr != nil {
			return
		}
		lo, hi := p*leaderPiece*shmChunk, min(n, (p+1)*leaderPiece*shmChunk)
		h.stepped = true
		reqs = append(reqs, h.leaders.IallreduceBytes(pctx, nil, recv[lo:hi], dt, op, opts...))
	}
	if h.seg == nil { // alone on its host
		if !sameStart(in, recv) {
			copy(recv, in)
		}
		for p := range (nch + leaderPiece - 1) / leaderPiece {
			post(p)
		}
		for p := range reqs {
			if err := wait(p); err != nil {
				return err
			}
		}
		return postErr
	}
	done := func(k int) {
		if (k+1)%leaderPiece == 0 || k == nch-1 {
			post(k / leaderPiece)
		}
	}
	if err := h.localReduce(ctx, in, recv, dt, op, 0, code, done); err != nil {
		return err
	}
	if postErr != nil {
		return postErr
	}
	ready := func(k int) error {
		if k%leaderPiece == 0 {
			return wait(k / leaderPiece)
		}
		return nil
	}
	return h.localBcast(ctx, recv, n, 0, 0, true, ready)
}

// bcast: on the root's host the root hands buf to its host's ranks, then
// the leaders broadcast from the root's host's leader, and the other
// hosts' leaders hand it to theirs.
func (h *hierarchy) bcast(ctx context.Context, buf []byte, root int, opts []CallOption) error {
	code := argCode(OpBcast, len(buf), root)
	rootHost := h.hostOf[root]
	if h.hostOf[h.world.rank] == rootHost {
		if h.seg != nil {
			if err := h.localBcast(ctx, buf, len(buf), h.localIndex(root), code, true, nil); err != nil {
				return err
			}
		}
		if h.me == 0 && h.leaders != nil {
			return h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Bcast(ctx, buf, rootHost, opts...) })
		}
		return nil
	}
	if h.seg != nil {
		// The arguments are checked before the leaders' step.
		if err := h.checkArgs(ctx, code, nil); err != nil {
			return err
		}
	}
	if h.me == 0 {
		if err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Bcast(ctx, buf, rootHost, opts...) }); err != nil {
			return err
		}
	}
	if h.seg == nil {
		return nil
	}
	return h.localBcast(ctx, buf, len(buf), 0, 0, true, nil)
}

// barrier: every local rank arrives, the leaders meet, the leaders
// release their hosts.
func (h *hierarchy) barrier(ctx context.Context, opts []CallOption) error {
	if h.seg != nil {
		if err := h.checkArgs(ctx, argCode(OpBarrier, 0), nil); err != nil {
			return err
		}
	}
	if h.hosts == 1 {
		return nil
	}
	if h.me == 0 {
		if err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Barrier(ctx, opts...) }); err != nil {
			return err
		}
	}
	if h.seg == nil {
		return nil
	}
	return h.sync(ctx)
}

// reduce: each host reduces into its leader (on one host, into the
// root), the leaders reduce into the root's host's leader, which hands
// the result to the root.
func (h *hierarchy) reduce(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, root int, opts []CallOption) error {
	isRoot := h.world.rank == root
	in := send
	if isRoot && send == nil {
		in = recv
	}
	n := len(in)
	code := argCode(OpReduce, n, int(dt), int(op), root)
	rootHost, myHost := h.hostOf[root], h.hostOf[h.world.rank]
	collector := 0
	if h.hosts == 1 {
		collector = h.localIndex(root)
	}
	var out []byte
	switch {
	case h.me == collector && isRoot:
		out = recv
	case h.me == collector:
		out = make([]byte, n)
	}
	if h.seg != nil {
		if err := h.localReduce(ctx, in, out, dt, op, collector, code, nil); err != nil {
			return err
		}
	} else if !sameStart(in, out) {
		copy(out, in)
	}
	if h.hosts == 1 {
		return nil
	}
	if h.me == 0 {
		err := h.leaderStep(ctx, func(ctx context.Context) error {
			if myHost == rootHost {
				return h.leaders.ReduceBytes(ctx, nil, out, dt, op, rootHost, opts...)
			}
			return h.leaders.ReduceBytes(ctx, out, nil, dt, op, rootHost, opts...)
		})
		if err != nil {
			return err
		}
	}
	if myHost != rootHost || h.localIndex(root) == 0 {
		return nil
	}
	buf := out
	if isRoot {
		buf = recv
	}
	return h.localBcast(ctx, buf, n, 0, 0, isRoot, nil)
}

// allgather: each host gathers its ranks' blocks (into every rank on one
// host, into the leader otherwise), the leaders allgather their hosts'
// blocks — maxLocal blocks per host, the unused ones zero, as the
// leaders' Allgather takes one size — and each leader hands the whole
// result to its host.
func (h *hierarchy) allgather(ctx context.Context, send, recv []byte, b int, opts []CallOption) error {
	r := h.world.rank
	mine := send
	if mine == nil {
		mine = recv[r*b : (r+1)*b]
	}
	var host []byte // the host's blocks in local order, at a leader between hosts
	if h.hosts > 1 && h.me == 0 {
		host = make([]byte, h.maxLocal*b)
		copy(host, mine)
	}
	if h.seg != nil {
		if err := h.localGather(ctx, argCode(OpAllgather, b), mine, recv, host, b); err != nil {
			return err
		}
	} else if send != nil {
		copy(recv[r*b:(r+1)*b], send)
	}
	if h.hosts == 1 {
		return nil
	}
	if h.me == 0 {
		all := make([]byte, h.hosts*len(host))
		err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Allgather(ctx, host, all, opts...) })
		if err != nil {
			return err
		}
		for i, ranks := range h.hostRanks {
			for j, q := range ranks {
				off := (i*h.maxLocal + j) * b
				copy(recv[q*b:(q+1)*b], all[off:off+b])
			}
		}
	}
	if h.seg == nil {
		return nil
	}
	return h.localBcast(ctx, recv, len(recv), 0, 0, true, nil)
}

// localGather passes the host's blocks of b bytes through the input
// slots, a chunk at a time: on one host every rank with a recv copies
// each block to its place in it; otherwise the leader copies them, in
// local order, into host. code is the call's argument code, checked in
// the first phase.
func (h *hierarchy) localGather(ctx context.Context, code uint64, mine, recv, host []byte, b int) error {
	for k := range chunks(b) {
		lo, hi := chunkRange(k, b)
		work := func() { copy(h.seg.slot(h.me), mine[lo:hi]) }
		var err error
		if k == 0 {
			err = h.checkArgs(ctx, code, work)
		} else {
			work()
			err = h.sync(ctx)
		}
		if err != nil {
			return err
		}
		for j, q := range h.local {
			switch {
			case h.hosts == 1 && recv != nil:
				copy(recv[q*b+lo:q*b+hi], h.seg.slot(j))
			case host != nil:
				copy(host[j*b+lo:j*b+hi], h.seg.slot(j))
			}
		}
		// The slots are written again only once every rank has read them.
		if err := h.sync(ctx); err != nil {
			return err
		}
	}
	return nil
}
