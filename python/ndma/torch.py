"""PyTorch integration: a DistributedDataParallel communication hook that
averages gradient buckets with NDMA's allreduce.

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import ndma, ndma.torch

    dist.init_process_group("gloo", ...)        # DDP's own setup traffic
    comm = ndma.Communicator()                   # the gradients' path
    model = DDP(net)
    state = ndma.torch.HookState(comm)
    model.register_comm_hook(state, ndma.torch.comm_hook)
    ...
    state.close()                                # before comm.close()

Or NDMA as a torch.distributed backend, for code that calls
torch.distributed itself (allreduce, broadcast, allgather, reduce_scatter
and barrier; importing ndma.torch registers it):

    import ndma.torch
    dist.init_process_group("ndma", init_method=..., rank=r, world_size=n)
    dist.all_reduce(t)                           # through the switch

The backend meets at NDMA_SWITCH (or the switches NDMA_SWITCHES lists) with NDMA_TOKEN (or NDMA_INSECURE=1) and
NDMA_CREDENTIAL, as a Communicator from the environment does, and takes
NDMA_HIERARCHY and NDMA_HOST_ID (several ranks per host through shared
memory); the job name comes from the process group's store.

Or data-parallel training with the optimizer in the memory pool
(MemoryX-style offload): the parameters and the optimizer's state live in
a pool Region, the memory nodes apply each step, and the ranks keep no
optimizer state (no DDP wrapper either):

    opt = ndma.torch.OffloadOptimizer(net.parameters(), comm, algo="adam", lr=1e-3)
    loss.backward(); opt.step(); opt.zero_grad()
    opt.close()                                  # before comm.close()

Each bucket's allreduce starts as soon as DDP hands the bucket over (while
backward goes on computing the next ones); when it completes, the
library's own thread divides the sum by the number of ranks and resolves
the future DDP waits on (Request.on_done), so no thread of the hook's
waits in between. Buckets are matched across ranks by the order of the calls
(NDMA numbers a communicator's collectives), not by GradBucket.index(),
which changes after the first iteration when DDP rebuilds its buckets.
"""

import concurrent.futures
import os
import sys
import threading
import uuid

import torch
import torch.distributed as dist

from . import Communicator, InvalidArgument, _lib

__all__ = ["HookState", "comm_hook", "ProcessGroupNDMA", "OffloadOptimizer"]


class _Completer:
    """Resolves a torch future once every NDMA request of a batch has
    completed: the library's thread runs the completion as the last one
    completes (Request.on_done), so no thread of ours waits in between.
    close() waits for the batches in flight."""

    def __init__(self):
        self._cv = threading.Condition()
        self._inflight = 0

    def add(self, reqs, result, after=None):
        """A _Batch whose future resolves to result once reqs have
        completed and after() has run, or fails with the first error."""
        inner = torch.futures.Future()
        batch = _Batch(inner)
        left = [len(reqs)]
        count = threading.Lock()

        def one():
            with count:
                left[0] -= 1
                if left[0] > 0:
                    return
            try:
                for r in reqs:
                    r.wait()  # completed: returns at once, or raises its error
                if after is not None:
                    after()
            except Exception as e:
                batch.error = e
            finally:
                # Resolved (to result, or to nothing on error) once the
                # batch is over; the error is raised by the future
                # chained to it, so that torch's C++ side (DDP) sees a
                # failed future, not a value.
                inner.set_result(result if batch.error is None else None)
                with self._cv:
                    self._inflight -= 1
                    self._cv.notify_all()

        with self._cv:
            self._inflight += 1
        if not reqs:
            left[0] = 1
            one()
            return batch
        for i, r in enumerate(reqs):
            try:
                r.on_done(one)
            except BaseException:
                # Not notified: these requests are waited for here, and
                # the batch completes once the notified ones have.
                for q in reqs[i:]:
                    try:
                        q.wait()
                    except Exception:
                        pass
                    one()
                raise
        return batch

    def close(self):
        """Waits for the batches in flight."""
        with self._cv:
            while self._inflight:
                self._cv.wait()


class _Batch:
    """The NDMA requests of one call. future resolves to the call's
    result, or fails with its error (wrapped by torch in a RuntimeError
    that names it: how DDP's C++ side sees it); error is the ndma
    exception itself once the batch is over (None if it succeeded)."""

    def __init__(self, inner):
        self.error = None
        self._inner = inner

        def unwrap(f):
            if self.error is not None:
                raise self.error
            return f.value()

        self.future = inner.then(unwrap)

    def wait(self):
        """Waits for the batch; raises its ndma exception if it failed."""
        self._inner.wait()
        if self.error is not None:
            raise self.error
        return self._inner.value()


class HookState:
    """The state comm_hook needs: the communicator, and the allreduces in
    flight. close() waits for them; a state is used by one DDP model."""

    def __init__(self, comm):
        self.comm = comm
        self.calls = 0  # buckets handed to NDMA so far
        self._done = _Completer()
        self._closed = False

    def submit(self, grad):
        """Starts the allreduce of grad and returns the future that
        resolves to the average (a new tensor)."""
        if self._closed:
            raise RuntimeError("ndma.torch.HookState is closed")
        if grad.dtype not in (torch.float32, torch.float64):
            raise InvalidArgument(_lib.ERR_ARG,
                                  f"gradient bucket of {grad.dtype}: NDMA reduces float32 and float64 (train in float32)")
        # Out of place: an in-place in-network allreduce would copy the
        # bucket inside the library on every call (the switch reads the
        # contribution while the result fills the buffer).
        out = torch.empty_like(grad)
        req = self.comm.iallreduce(grad, out=out)
        self.calls += 1
        n = self.comm.size
        return self._done.add([req], out, lambda: out.div_(n)).future

    def close(self):
        """Waits for the allreduces in flight."""
        if not self._closed:
            self._closed = True
            self._done.close()


def comm_hook(state, bucket):
    """DistributedDataParallel communication hook: the bucket's gradients
    summed over the ranks by NDMA, divided by their number."""
    return state.submit(bucket.buffer())


def _Work(batch):
    """A collective of the backend in progress. torch's C++ side (DDP)
    takes a Work built on the batch's future, which fails with the NDMA
    error. torch.distributed's Python functions (all_reduce...) get a
    _PyWork instead, whose wait() raises the NDMA error itself: the C++
    Work's wait() returns True even when its future failed (torch 1.13),
    so a failed collective would pass unnoticed."""
    if sys._getframe(1).f_back.f_globals.get("__name__") == "torch.distributed.distributed_c10d":
        return _PyWork(batch)
    return torch._C._distributed_c10d._create_work_from_future(batch.future)


class _PyWork:
    """A Work for torch.distributed's Python functions (see _Work)."""

    def __init__(self, batch):
        self._batch = batch

    def wait(self, timeout=None):
        self._batch.wait()
        return True

    def is_completed(self):
        return self._batch.future.done()

    def is_success(self):
        return self.is_completed() and self._batch.error is None

    def exception(self):
        return self._batch.error

    def result(self):
        out = self._batch.wait()
        return [] if out is None else list(out)

    def get_future(self):
        return self._batch.future


def _reduce_op(opts):
    op = dist.ReduceOp.SUM if opts is None else opts.reduceOp
    for name, want in (("sum", dist.ReduceOp.SUM), ("prod", dist.ReduceOp.PRODUCT), ("min", dist.ReduceOp.MIN),
                       ("max", dist.ReduceOp.MAX)):
        if op == want:
            return name
    raise InvalidArgument(_lib.ERR_ARG, f"reduction {_op_name(op)}: the ndma backend does SUM, PRODUCT, MIN and MAX")


def _op_name(op):
    """A ReduceOp's name (BAND), where its repr is an object address."""
    kind = getattr(op, "op", op)  # a ReduceOp wraps its RedOpType
    return getattr(kind, "name", None) or str(kind)


class ProcessGroupNDMA(dist.ProcessGroup):
    """torch.distributed's process group over an ndma.Communicator:
    allreduce, broadcast, allgather, reduce_scatter and barrier. Each call
    starts its NDMA collectives at once (so DDP's buckets overlap backward)
    and returns a Work whose future the library's thread resolves as the
    call's collectives complete."""

    def __init__(self, comm):
        super().__init__(comm.rank, comm.size)
        self.comm = comm
        self._done = _Completer()

    def getBackendName(self):
        return "ndma"

    def allreduce(self, tensors, opts=None):
        op = _reduce_op(opts)
        # Out of place, then copied back (see HookState.submit).
        outs = [torch.empty_like(t) for t in tensors]
        reqs = [self.comm.iallreduce(t, op, out=o) for t, o in zip(tensors, outs)]

        def back():
            for t, o in zip(tensors, outs):
                t.copy_(o)

        return _Work(self._done.add(reqs, tensors, back))

    def broadcast(self, tensors, opts=None):
        root = 0 if opts is None else opts.rootRank
        reqs = [self.comm.ibcast(t, root) for t in tensors]
        return _Work(self._done.add(reqs, tensors))

    def allgather(self, output_tensors, input_tensors, opts=None):
        reqs, copies = [], []
        for outs, inp in zip(output_tensors, input_tensors):
            if len(outs) != self.comm.size:
                raise InvalidArgument(_lib.ERR_ARG, f"allgather: {len(outs)} output tensors for {self.comm.size} ranks")
            flat = torch.empty((self.comm.size,) + tuple(inp.shape), dtype=inp.dtype)
            reqs.append(self.comm.iallgather(inp.contiguous(), flat))
            copies.append((flat, outs))

        def scatter():
            for flat, outs in copies:
                for i, o in enumerate(outs):
                    o.copy_(flat[i])

        return _Work(self._done.add(reqs, output_tensors, scatter))

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        op = _reduce_op(opts)
        reqs = []
        for out, ins in zip(output_tensors, input_tensors):
            if len(ins) != self.comm.size:
                raise InvalidArgument(_lib.ERR_ARG, f"reduce_scatter: {len(ins)} input tensors for {self.comm.size} ranks")
            flat = torch.stack([t.reshape(out.shape) for t in ins])
            reqs.append(self.comm.ireduce_scatter(flat, out, op))
        return _Work(self._done.add(reqs, output_tensors))

    def barrier(self, opts=None):
        return _Work(self._done.add([self.comm.ibarrier()], None))

    def shutdown(self):
        """Waits for the calls in flight and closes the communicator."""
        self._done.close()
        self.comm.close()


def _create(store, rank, size, timeout):
    # Every rank must name the same job: rank 0 draws one, the store
    # carries it to the others. Under a launcher that names the job
    # (NDMA_JOB), it is a group of that job's own (JOB.torch-...), which
    # a rank whose credential binds it to that job (JOB/RANK, as ndma
    # testbed run gives) may join.
    key = "ndma/job"
    if rank == 0:
        name = "torch-" + uuid.uuid4().hex[:12]
        if os.environ.get("NDMA_JOB"):
            name = os.environ["NDMA_JOB"] + "." + name
        store.set(key, name)
    job = store.get(key).decode()
    # NDMA_SWITCHES (a comma-separated list) shards the in-network
    # collectives over several switches; the library takes the list.
    sw = os.environ.get("NDMA_SWITCHES") or os.environ.get("NDMA_SWITCH")
    if not sw:
        raise InvalidArgument(_lib.ERR_ARG, "the ndma backend: neither NDMA_SWITCH nor NDMA_SWITCHES is set (the ranks meet at the switch)")
    insecure = os.environ.get("NDMA_INSECURE", "") in ("1", "true")
    hierarchy = os.environ.get("NDMA_HIERARCHY", "").strip().lower() or None
    if hierarchy not in (None, "auto", "off"):
        raise InvalidArgument(_lib.ERR_ARG, f"the ndma backend: NDMA_HIERARCHY={hierarchy!r}: want auto or off")
    comm = Communicator(rank, size, sw, token=os.environ.get("NDMA_TOKEN"), job=job, insecure=insecure,
                        credential=os.environ.get("NDMA_CREDENTIAL"), timeout=timeout.total_seconds(),
                        hierarchy=hierarchy, host_id=os.environ.get("NDMA_HOST_ID") or None)
    return ProcessGroupNDMA(comm)


if not hasattr(dist.Backend, "NDMA"):
    dist.Backend.register_backend("ndma", _create)


class OffloadOptimizer:
    """Data-parallel training with the optimizer in the memory pool.

    The parameters (float32 CPU tensors, the same on every rank at the
    start: rank 0's are broadcast) and the optimizer's state (SGD's
    momentum, Adam's two moments) live in one pool Region; the ranks hold
    the parameters' current values and their gradients only. step():

      1. every rank's gradients are reduce-scattered (summed) through the
         switch: rank r receives its share of each chunk of the flattened
         gradient, divided by the number of ranks (the average, as DDP);
      2. rank r sends its shares to the memory nodes as optimizer steps,
         which update the parameters and the state in place, and reads
         back its shares of the new parameters;
      3. the shares are allgathered (multicast through the switch) into
         every rank's parameters.

    The gradient is cut into chunks of at most chunk_elems elements per
    rank (sized so that the padding is under one element per chunk), so
    that one chunk's optimizer step and read overlap the next chunks'
    reduce-scatter and the previous chunks' allgather. Every rank holds
    the same parameters after each step (every rank copies the same
    bytes); with the communicator's deterministic mode the results are
    also reproducible run to run.

    The parameters are re-pointed at one flat tensor (each parameter's
    .data becomes a view of it). algo "adam" (lr, betas, eps) or "sgd"
    (lr, momentum: PyTorch's SGD without dampening); weight_decay as
    PyTorch's (added to the gradient). stripe: the region's interleave
    unit (0: 64 KiB). Each parameter's .grad is a view of one flat
    gradient tensor, which backward accumulates into and zero_grad()
    zeroes: no copy per step."""

    def __init__(self, params, comm, *, algo="adam", lr=1e-3, betas=(0.9, 0.999), eps=1e-8, momentum=0.9,
                 weight_decay=0.0, chunk_elems=1 << 15, stripe=0):
        import ndma

        self.params = [p for p in params if p.requires_grad]
        if not self.params:
            raise InvalidArgument(_lib.ERR_ARG, "OffloadOptimizer: no parameters that require gradients")
        for p in self.params:
            if p.dtype != torch.float32 or p.device.type != "cpu":
                raise InvalidArgument(_lib.ERR_ARG, f"OffloadOptimizer: a parameter of {p.dtype} on {p.device}; "
                                      "the memory nodes update float32 CPU parameters")
        if algo not in ("adam", "sgd"):
            raise InvalidArgument(_lib.ERR_ARG, f"OffloadOptimizer: algo {algo!r}: want adam or sgd")
        if chunk_elems < 1:
            raise InvalidArgument(_lib.ERR_ARG, f"OffloadOptimizer: chunk_elems {chunk_elems}: want 1 or more")
        self.comm, self.algo = comm, algo
        self.hyper = dict(lr=lr, betas=betas, eps=eps, momentum=momentum, weight_decay=weight_decay)
        self.t = 0
        n = sum(p.numel() for p in self.params)
        size = comm.size
        per = -(-n // size)  # elements per rank in all
        self.chunks = -(-per // int(chunk_elems))
        self.k = -(-per // self.chunks)  # elements per rank per chunk (at most chunk_elems)
        padded = self.chunks * size * self.k
        self.n, self.padded = n, padded
        self.flat = torch.zeros(padded, dtype=torch.float32)
        self.grad = torch.zeros(padded, dtype=torch.float32)
        self.share = torch.zeros(self.chunks, self.k, dtype=torch.float32)
        off, self._gviews = 0, []
        with torch.no_grad():
            for p in self.params:
                m = p.numel()
                self.flat[off:off + m].copy_(p.data.reshape(-1))
                p.data = self.flat[off:off + m].view_as(p)
                self._gviews.append(self.grad[off:off + m].view_as(p))
                off += m
        # Every rank starts from rank 0's parameters.
        comm.bcast(self.flat, root=0)
        # One region holds the parameters and, at stride and 2*stride,
        # their state. The stride depends on how many memory nodes the
        # region spreads over, known once it exists: allocate again if the
        # first guess was short.
        need = 3 if algo == "adam" else 2
        nbytes = padded * 4
        guess = nbytes
        for _ in range(4):
            self.region = ndma.Region(comm, need * guess, stripe)
            self.stride = self.region.state_stride(nbytes)
            if need * self.stride <= self.region.size:
                break
            guess = self.stride
            self.region.free()
        else:
            raise ndma.PoolError(_lib.ERR_POOL, "OffloadOptimizer: the pool's memory nodes changed while allocating")
        # Each rank writes its own shares of the initial parameters (the
        # moments start at the fresh region's zeros).
        for c in range(self.chunks):
            self.region.write(self._offset(c), self._mine(c))
        comm.barrier()
        self._point_grads()
        self.window = 2  # reduce-scatters in flight
        self._steps = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ndma-offload-step")
        self._reads = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="ndma-offload-read")

    def _offset(self, c):
        """Byte offset of this rank's share of chunk c."""
        return (c * self.comm.size + self.comm.rank) * self.k * 4

    def _mine(self, c):
        """This rank's share of chunk c of the parameters (a view)."""
        i = (c * self.comm.size + self.comm.rank) * self.k
        return self.flat[i:i + self.k]

    def _chunk(self, t, c):
        w = self.comm.size * self.k
        return t[c * w:(c + 1) * w]

    @property
    def pool_bytes(self):
        """Bytes of the pool region (parameters and optimizer state)."""
        return self.region.size

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients, which are views of one flat tensor that
        backward accumulates into in place (set_to_none lets backward
        allocate fresh ones instead; step() copies those in)."""
        if set_to_none:
            for p in self.params:
                p.grad = None
        else:
            self.grad.zero_()
            self._point_grads()

    def _point_grads(self):
        """Makes every parameter's .grad its view of the flat gradient:
        one backward made itself is copied in, a missing one is zero."""
        for p, view in zip(self.params, self._gviews):
            if p.grad is None:
                view.zero_()
                p.grad = view
            elif p.grad.data_ptr() != view.data_ptr():
                view.copy_(p.grad)
                p.grad = view

    @torch.no_grad()
    def step(self):
        """Averages the gradients over the ranks, has the memory nodes
        apply the optimizer, and brings every rank the new parameters."""
        self.t += 1
        self._point_grads()
        comm, size = self.comm, self.comm.size
        # Three stages overlap: this thread takes each chunk's share as its
        # reduce-scatter completes and hands it to the step worker; the
        # read worker reads the chunk's new parameters once its step is
        # done; this thread waits for that and starts the chunk's
        # allgather, then the next reduce-scatter. Two reduce-scatters run
        # at once (not all: the first chunks' must end early for the
        # stages to overlap; 16-32 Ki elements per rank per chunk and two
        # in flight measured best on the 8-host testbed). Every collective starts from
        # this thread in an order that depends only on the number of
        # chunks, the same on every rank.
        rs, steps, reads, ag = [], [], [], []

        def step(c):
            g = self.share[c]
            g.div_(size)
            self.region.optim_step(self._offset(c), self.stride, g, algo=self.algo, step=self.t, **self.hyper)

        def read(c):
            steps[c].result()
            self.region.read(self._offset(c), self._mine(c))

        def start_rs(c):
            if c < self.chunks:
                rs.append(comm.ireduce_scatter(self._chunk(self.grad, c), self.share[c]))

        def start_ag(c):
            reads[c].result()
            ag.append(comm.iallgather(None, self._chunk(self.flat, c)))

        ok = False
        try:
            for c in range(self.window):
                start_rs(c)
            for c in range(self.chunks):
                rs[c].wait()
                steps.append(self._steps.submit(step, c))
                reads.append(self._reads.submit(read, c))
                start_ag(c)
                start_rs(c + self.window)
            for r in ag:
                r.wait()
            ok = True
        finally:
            if not ok:  # the buffers stay in use until every request ends
                for f in steps + reads:
                    try:
                        f.result()
                    except Exception:  # the first error is the one raised
                        pass
                for r in rs + ag:
                    try:
                        r.wait()
                    except Exception:
                        pass

    def close(self):
        """Frees the pool region (collective) and stops the workers."""
        self._steps.shutdown()
        self._reads.shutdown()
        self.region.free()
