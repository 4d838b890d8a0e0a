package coll

import (
	"context"

	"github.com/ndma/ndma/wire"
)

// The two-level collectives of one block per rank: ReduceScatter,
// Gather, Scatter and Alltoall (see hier.go). Between hosts the leaders move a
// host's blocks as one, in host order: host i's ranks' blocks, in local
// order, padded to maxLocal blocks (hostMajor), as the leaders' calls
// take one size per rank.

// hostMajor lays out flat (a block of b bytes per world rank, in rank
// order) as the leaders' calls take it, or back (toFlat): hosts·maxLocal
// blocks, host i's ranks at i·maxLocal on, the padding untouched.
func (h *hierarchy) hostMajor(flat, major []byte, b int, toFlat bool) {
	for i, ranks := range h.hostRanks {
		for j, q := range ranks {
			m := major[(i*h.maxLocal+j)*b : (i*h.maxLocal+j+1)*b]
			if toFlat {
				copy(flat[q*b:(q+1)*b], m)
			} else {
				copy(m, flat[q*b:(q+1)*b])
			}
		}
	}
}

// reduceScatter: each host reduces every block into its leader (on one
// host, into every rank), the leaders reduce-scatter their hosts'
// blocks (a host's as one block), and each leader hands its host the
// host's blocks, of which each rank keeps its own.
func (h *hierarchy) reduceScatter(ctx context.Context, send, recv []byte, dt wire.Dtype, op ReduceOp, opts []CallOption) error {
	b, r := len(recv), h.world.rank
	code := argCode(OpReduceScatter, b, int(dt), int(op))
	if h.hosts == 1 {
		all := make([]byte, len(send))
		if err := h.localReduce(ctx, send, all, dt, op, -1, code, nil); err != nil {
			return err
		}
		copy(recv, all[r*b:(r+1)*b])
		return nil
	}
	in := make([]byte, h.hosts*h.maxLocal*b)
	h.hostMajor(send, in, b, false)
	out := in // a rank alone on its host is its own leader
	if h.seg != nil {
		out = nil
		if h.me == 0 {
			out = make([]byte, len(in))
		}
		if err := h.localReduce(ctx, in, out, dt, op, 0, code, nil); err != nil {
			return err
		}
	}
	mine := make([]byte, h.maxLocal*b) // the host's blocks
	if h.me == 0 {
		err := h.leaderStep(ctx, func(ctx context.Context) error {
			return h.leaders.ReduceScatterBytes(ctx, out, mine, dt, op, opts...)
		})
		if err != nil {
			return err
		}
	}
	if h.seg != nil {
		if err := h.localBcast(ctx, mine, len(mine), 0, 0, true, nil); err != nil {
			return err
		}
	}
	copy(recv, mine[h.me*b:(h.me+1)*b])
	return nil
}

// gather: each host gathers its ranks' blocks into its leader (on one
// host, into the root), the leaders gather their hosts' blocks into the
// root's host's leader, which hands the result to the root.
func (h *hierarchy) gather(ctx context.Context, send, recv []byte, root, b int, opts []CallOption) error {
	r, isRoot := h.world.rank, h.world.rank == root
	mine := send
	if mine == nil {
		mine = recv[r*b : (r+1)*b]
	}
	code := argCode(OpGather, b, root)
	if h.hosts == 1 {
		var out []byte
		if isRoot {
			out = recv
		}
		return h.localGather(ctx, code, mine, out, nil, b)
	}
	var host []byte // the host's blocks in local order, at the leader
	if h.me == 0 {
		host = make([]byte, h.maxLocal*b)
		copy(host, mine)
	}
	if h.seg != nil {
		if err := h.localGather(ctx, code, mine, nil, host, b); err != nil {
			return err
		}
	}
	rootHost, myHost := h.hostOf[root], h.hostOf[r]
	var result []byte // at the root's host's leader
	if h.me == 0 {
		var all []byte
		if myHost == rootHost {
			all = make([]byte, h.hosts*len(host))
			result = recv
			if !isRoot {
				result = make([]byte, h.world.size*b)
			}
		}
		err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Gather(ctx, host, all, rootHost, opts...) })
		if err != nil {
			return err
		}
		if all != nil {
			h.hostMajor(result, all, b, true)
		}
	}
	if myHost != rootHost || h.localIndex(root) == 0 {
		return nil
	}
	if isRoot {
		result = recv
	}
	return h.localBcast(ctx, result, h.world.size*b, 0, 0, isRoot, nil)
}

// scatter: on the root's host the root hands its blocks to the leader
// (on one host, to every rank), the leaders scatter the hosts' blocks
// (a host's as one block) from the root's host's leader, and each leader
// hands its host the host's blocks, of which each rank keeps its own.
func (h *hierarchy) scatter(ctx context.Context, send, recv []byte, root, b int, opts []CallOption) error {
	r, isRoot := h.world.rank, h.world.rank == root
	n := h.world.size * b
	code := argCode(OpScatter, b, root)
	keep := func(all []byte) {
		if recv != nil {
			copy(recv, all[r*b:(r+1)*b])
		}
	}
	if h.hosts == 1 {
		all := send
		if !isRoot {
			all = make([]byte, n)
		}
		if err := h.localBcast(ctx, all, n, h.localIndex(root), code, true, nil); err != nil {
			return err
		}
		if !isRoot {
			keep(all)
		} else if recv != nil {
			copy(recv, send[r*b:(r+1)*b])
		}
		return nil
	}
	rootHost, myHost := h.hostOf[root], h.hostOf[r]
	var all []byte // the root's blocks, at the root's host's leader
	if myHost == rootHost {
		all = send
		if !isRoot {
			all = make([]byte, n)
		}
		if h.seg != nil {
			if err := h.localBcast(ctx, all, n, h.localIndex(root), code, h.me == 0, nil); err != nil {
				return err
			}
		}
	} else if h.seg != nil {
		// The argument check the root's host made in its first phase.
		if err := h.checkArgs(ctx, code, nil); err != nil {
			return err
		}
	}
	mine := make([]byte, h.maxLocal*b) // the host's blocks
	if h.me == 0 {
		var major []byte
		if myHost == rootHost {
			major = make([]byte, h.hosts*h.maxLocal*b)
			h.hostMajor(all, major, b, false)
		}
		err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Scatter(ctx, major, mine, rootHost, opts...) })
		if err != nil {
			return err
		}
	}
	if h.seg != nil {
		if err := h.localBcast(ctx, mine, len(mine), 0, 0, true, nil); err != nil {
			return err
		}
	}
	if isRoot && recv == nil {
		return nil // in place: the root's block stays in send
	}
	copy(recv, mine[h.me*b:(h.me+1)*b])
	return nil
}

// alltoall: each host passes its ranks' whole send buffers to its
// leader (on one host, to every rank, which keeps its blocks); the
// leaders exchange, for each pair of hosts, the blocks the one's ranks
// send the other's (maxLocal×maxLocal blocks, source rank-major, padded),
// and each leader hands its host what it received, of which each rank
// keeps the blocks addressed to it.
func (h *hierarchy) alltoall(ctx context.Context, send, recv []byte, b int, opts []CallOption) error {
	n, m := h.world.size, h.maxLocal
	B := n * b      // one rank's send
	var host []byte // the host's sends in local order: at every rank on one host, else at the leader
	if h.hosts == 1 || h.me == 0 {
		host = make([]byte, len(h.local)*B)
		copy(host, send)
	}
	if h.seg != nil {
		if err := h.localGather(ctx, argCode(OpAlltoall, b), send, nil, host, B); err != nil {
			return err
		}
	}
	r := h.world.rank
	if h.hosts == 1 {
		for j, s := range h.local {
			copy(recv[s*b:(s+1)*b], host[j*B+r*b:j*B+(r+1)*b])
		}
		return nil
	}
	got := make([]byte, h.hosts*m*m*b) // from each host: [source j][destination q]
	if h.me == 0 {
		out := make([]byte, len(got))
		for k, dst := range h.hostRanks {
			for j := range h.local {
				for q, d := range dst {
					o := ((k*m+j)*m + q) * b
					copy(out[o:o+b], host[j*B+d*b:j*B+(d+1)*b])
				}
			}
		}
		err := h.leaderStep(ctx, func(ctx context.Context) error { return h.leaders.Alltoall(ctx, out, got, opts...) })
		if err != nil {
			return err
		}
	}
	if h.seg != nil {
		if err := h.localBcast(ctx, got, len(got), 0, 0, true, nil); err != nil {
			return err
		}
	}
	for i, src := range h.hostRanks {
		for j, s := range src {
			o := ((i*m+j)*m + h.me) * b
			copy(recv[s*b:(s+1)*b], got[o:o+b])
		}
	}
	return nil
}
