"""NDMA's collectives for Python: numpy arrays and CPU torch tensors.

    import ndma, numpy as np
    with ndma.Communicator() as comm:          # rank, size, switch from the launcher
        x = np.full(1024, comm.rank, dtype=np.float32)
        comm.allreduce(x)                       # in place: x = sum over ranks
        req = comm.iallreduce(x, op="max")      # non-blocking
        req.wait()

Buffers are used in place: a numpy array or a contiguous CPU torch tensor
of float32, float64, int32 or int64 (any dtype for bcast and allgather,
which move bytes). A non-blocking call keeps its buffers alive, and they
must not be touched, until its request completes (wait, or test returns
True). Every failure raises NDMAError (or a subclass naming the kind)
with the library's message.

Memory in the switch's pool (memory nodes running ndma memd) is a Region,
shared by a communicator's ranks; its memory nodes also apply optimizer
steps in place (ndma.torch.OffloadOptimizer trains with the optimizer
there).

The library is libndma (make libndma in the NDMA checkout writes
build/libndma.so, which this package finds; elsewhere set NDMA_LIB).
"""

import ctypes
import threading

from . import _lib

__all__ = [
    "Communicator",
    "Request",
    "NDMAError",
    "InvalidArgument",
    "LaunchError",
    "NoSwitch",
    "RendezvousError",
    "AuthError",
    "RankError",
    "Timeout",
    "Closed",
    "PoolError",
    "Region",
]

_L = None
_L_lock = threading.Lock()


def _lib_handle():
    global _L
    with _L_lock:
        if _L is None:
            _L = _lib.load()
        return _L


class NDMAError(RuntimeError):
    """A failed NDMA call: code is ndma.h's error code, message says why."""

    def __init__(self, code, message):
        self.code, self.message = code, message
        super().__init__(message)


class InvalidArgument(NDMAError, ValueError):
    """A bad argument: a buffer of the wrong kind, a root out of range..."""


class LaunchError(NDMAError):
    """No launcher's environment (rank, size), or an invalid one."""


class NoSwitch(NDMAError):
    """No switch answers at the address given."""


class RendezvousError(NDMAError):
    """The ranks did not all join in time, or the rank is taken."""


class AuthError(NDMAError):
    """The switch refused the token or the credential."""


class RankError(NDMAError):
    """A rank died, left or went silent."""


class Timeout(NDMAError, TimeoutError):
    """The call's time limit passed."""


class Closed(NDMAError):
    """The communicator was closed."""


class PoolError(NDMAError):
    """The memory pool has no room, too few live memory nodes, or lost the
    data."""


_ERRORS = {
    _lib.ERR_ARG: InvalidArgument,
    _lib.ERR_ENV: LaunchError,
    _lib.ERR_NO_SWITCH: NoSwitch,
    _lib.ERR_RENDEZVOUS: RendezvousError,
    _lib.ERR_AUTH: AuthError,
    _lib.ERR_RANK: RankError,
    _lib.ERR_TIMEOUT: Timeout,
    _lib.ERR_CLOSED: Closed,
    _lib.ERR_POOL: PoolError,
}


def _check(rc):
    if rc != _lib.OK:
        L = _lib_handle()
        msg = L.ndma_last_error().decode(errors="replace") or L.ndma_strerror(rc).decode()
        raise _ERRORS.get(rc, NDMAError)(rc, msg)


_OPS = {"sum": _lib.SUM, "prod": _lib.PROD, "min": _lib.MIN, "max": _lib.MAX}


def _op(op):
    try:
        return _OPS[op.lower()]
    except (KeyError, AttributeError):
        raise InvalidArgument(_lib.ERR_ARG, f"reduction {op!r}: want one of {', '.join(_OPS)}") from None


class _Buf:
    """A buffer's address, byte size, element count and ndma dtype (None
    for a dtype the reductions do not take)."""

    __slots__ = ("obj", "ptr", "nbytes", "count", "dtype", "name")

    def __init__(self, obj, what):
        self.obj = obj
        mod = type(obj).__module__
        if mod.startswith("torch"):
            self._torch(obj, what)
        elif mod.startswith("numpy"):
            self._numpy(obj, what)
        else:
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: a {type(obj).__name__}; want a numpy array or a CPU torch tensor")

    def _numpy(self, a, what):
        if not a.flags.c_contiguous:
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: the numpy array is not contiguous (use numpy.ascontiguousarray)")
        if not a.flags.writeable:
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: the numpy array is read-only")
        self.ptr, self.nbytes, self.count = a.ctypes.data, a.nbytes, a.size
        self.name = str(a.dtype)
        self.dtype = {"float32": _lib.FLOAT32, "float64": _lib.FLOAT64, "int32": _lib.INT32, "int64": _lib.INT64}.get(self.name)

    def _torch(self, t, what):
        import torch

        if t.device.type != "cpu":
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: the tensor is on {t.device}; NDMA takes CPU tensors")
        if not t.is_contiguous():
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: the tensor is not contiguous (use .contiguous())")
        self.ptr, self.nbytes, self.count = t.data_ptr(), t.numel() * t.element_size(), t.numel()
        self.name = str(t.dtype)
        self.dtype = {torch.float32: _lib.FLOAT32, torch.float64: _lib.FLOAT64, torch.int32: _lib.INT32, torch.int64: _lib.INT64}.get(t.dtype)

    def reducible(self, what):
        if self.dtype is None:
            raise InvalidArgument(_lib.ERR_ARG, f"{what}: dtype {self.name}; reductions take float32, float64, int32 or int64")
        return self


class Request:
    """A non-blocking collective in progress. It holds the call's buffers
    until it completes."""

    def __init__(self, comm, handle, bufs, result):
        self._comm, self._h, self._bufs, self._result = comm, handle, bufs, result
        self._done = False
        self._lock = threading.Lock()

    def wait(self):
        """Blocks until the collective completes; returns its result (the
        output buffer) or raises its error."""
        with self._lock:
            if not self._done:
                self._done = True
                try:
                    _check(self._comm._L.ndma_wait(self._h))
                finally:
                    self._comm._forget(self)
                    self._bufs = None
        return self._result

    def test(self):
        """True once the collective has completed (then raises its error if
        it failed), False while it runs."""
        with self._lock:
            if self._done:
                return True
            done = ctypes.c_int(0)
            rc = self._comm._L.ndma_test(self._h, ctypes.byref(done))
            if done.value:
                self._done = True
                self._comm._forget(self)
                self._bufs = None
            _check(rc)
            return bool(done.value)

    def on_done(self, fn):
        """Has fn() called once the collective has completed, on a thread
        of the library (at once if it already has), so that no thread of
        the caller's waits for it; fn typically calls wait(), which then
        returns at once. fn should return quickly; an exception it raises
        is printed and dropped. Once per request, and before wait() or a
        test() that returned True (which free the request: InvalidArgument
        then)."""
        key = _notify_key(fn)
        try:
            _check(self._comm._L.ndma_request_notify(self._h, _NOTIFY, key))
        except BaseException:
            _notify_drop(key)
            raise

    @property
    def done(self):
        return self._done


# Notifications (Request.on_done) go through one trampoline that lives as
# long as the module, so that no ctypes callback object is freed while
# the library may still call it; arg is a key into _notifies.
_notifies = {}
_notify_lock = threading.Lock()
_notify_next = 0


def _notify_key(fn):
    global _notify_next
    with _notify_lock:
        _notify_next += 1
        _notifies[_notify_next] = fn
        return _notify_next


def _notify_drop(key):
    with _notify_lock:
        return _notifies.pop(key, None)


def _dispatch(arg):
    fn = _notify_drop(arg)
    if fn is not None:
        fn()


_NOTIFY = _lib.NOTIFY_FN(_dispatch)


class Communicator:
    """A group of ranks that run collectives together, MPI style: every
    rank calls the same collectives in the same order with matching
    arguments.

    With no arguments the launch comes from the environment (NDMA_RANK/
    NDMA_SIZE, mpirun, Slurm or torchrun's RANK/WORLD_SIZE; NDMA_SWITCH or
    NDMA_SWITCHES, NDMA_TOKEN, NDMA_CREDENTIAL or NDMA_INSECURE=1...). Otherwise give rank,
    size and switch ("host:port", or "host:port,host:port,..." to shard
    the in-network collectives over several switches), and a credential (the rank's member
    credential file, or the directory ndma fabric init wrote, with job)
    and a token, or insecure=True to seal nothing (the token then
    optional). timeout
    (seconds) bounds each collective; join_timeout the rendezvous;
    deterministic makes in-network reductions bitwise reproducible;
    algorithms fixes operations' algorithms ({"allreduce": "ring"}, see
    set_algo). hierarchy="auto" runs the ranks that share a host through
    shared memory (one leader per host on the network), "off" every rank
    over the network, None the library's default (auto); host_id names
    this rank's host for it (None: the library tells hosts apart itself). Settings go through the
    library, not the environment: the library sees only the environment
    the process started with (NDMA_HIERARCHY and NDMA_HOST_ID apply to
    the launch from the environment).

    local_size is the number of ranks of this host that share memory
    (1 without the hierarchy).
    """

    def __init__(self, rank=None, size=None, switch=None, *, token=None, job=None, insecure=False, credential=None,
                 listen=None, mtu=0, timeout=None, join_timeout=None, deterministic=False, algorithms=None,
                 hierarchy=None, host_id=None):
        self._L = _lib_handle()
        self._h = 0
        self._pending = set()
        self._lock = threading.Lock()
        h = ctypes.c_uint64(0)
        if rank is None and size is None and switch is None:
            _check(self._L.ndma_comm_from_env(ctypes.byref(h)))
        else:
            if rank is None or size is None or switch is None:
                raise InvalidArgument(_lib.ERR_ARG, "give rank, size and switch together (or none: the launcher's environment)")
            if hierarchy not in _lib.HIERARCHY:
                raise InvalidArgument(_lib.ERR_ARG, f"hierarchy={hierarchy!r}: want \"auto\", \"off\" or None (the default)")
            cfg = _lib.Config()
            self._L.ndma_config_init(ctypes.byref(cfg))
            enc = lambda s: None if s is None else str(s).encode()  # noqa: E731
            cfg.rank, cfg.size = int(rank), int(size)
            cfg.switch_addr, cfg.job, cfg.token = enc(switch), enc(job), enc(token)
            cfg.insecure, cfg.credential, cfg.listen = int(bool(insecure)), enc(credential), enc(listen)
            cfg.mtu = int(mtu)
            cfg.timeout_ms = 0 if timeout is None else max(1, int(timeout * 1000))
            cfg.join_timeout_ms = 0 if join_timeout is None else max(1, int(join_timeout * 1000))
            cfg.deterministic = int(bool(deterministic))
            cfg.hierarchy, cfg.host_id = _lib.HIERARCHY[hierarchy], enc(host_id)
            self._cfg_refs = cfg  # the strings live as long as the call
            _check(self._L.ndma_comm_create(ctypes.byref(cfg), ctypes.byref(h)))
        self._h = h.value
        try:
            if timeout is not None:
                _check(self._L.ndma_comm_set_timeout(self._h, max(1, int(timeout * 1000))))
            if deterministic:
                _check(self._L.ndma_comm_set_deterministic(self._h, 1))
            for op, algo in (algorithms or {}).items():
                self.set_algo(op, algo)
        except NDMAError:
            self.close()
            raise
        r, s = ctypes.c_int(), ctypes.c_int()
        _check(self._L.ndma_comm_rank(self._h, ctypes.byref(r)))
        _check(self._L.ndma_comm_size(self._h, ctypes.byref(s)))
        self.rank, self.size = r.value, s.value
        _check(self._L.ndma_comm_local_size(self._h, ctypes.byref(s)))
        self.local_size = s.value

    def set_algo(self, op, algo):
        """Fixes op's algorithm ("allreduce", "bcast", "reduce",
        "allgather", "reducescatter", "barrier") from the next call on:
        "innet", "ring", "recursive_doubling", "rabenseifner", "binomial",
        "chain", "scatter_allgather", "direct", or "auto" (the tuner).
        Every rank should make the same choice."""
        _check(self._L.ndma_comm_set_algo(self._handle(), str(op).encode(), None if algo is None else str(algo).encode()))

    # Lifetime.

    def close(self):
        """Leaves the group. Requests in flight fail with Closed; using
        the communicator afterwards raises Closed. Closing twice is fine."""
        with self._lock:
            h, self._h = self._h, 0
        if h:
            _check(self._L.ndma_comm_free(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def closed(self):
        return self._h == 0

    def _handle(self):
        h = self._h
        if not h:
            raise Closed(_lib.ERR_CLOSED, "ndma: the communicator is closed")
        return h

    def _forget(self, req):
        with self._lock:
            self._pending.discard(req)

    def _start(self, fn, args, bufs, result, blocking):
        h = self._handle()
        if blocking:
            _check(fn(h, *args))
            return result
        rh = ctypes.c_uint64(0)
        _check(fn(h, *args, ctypes.byref(rh)))
        req = Request(self, rh.value, bufs, result)
        with self._lock:
            self._pending.add(req)
        return req

    # Collectives. Each has a non-blocking form, i<name>, returning a Request.

    def allreduce(self, buf, op="sum", out=None):
        """Reduces buf element-wise over all ranks, into out (default: buf,
        in place). Returns the output."""
        return self._allreduce(buf, op, out, True)

    def iallreduce(self, buf, op="sum", out=None):
        return self._allreduce(buf, op, out, False)

    def _allreduce(self, buf, op, out, blocking):
        s = _Buf(buf, "allreduce buffer").reducible("allreduce")
        o = s if out is None else _Buf(out, "allreduce output").reducible("allreduce")
        if out is not None and (o.dtype != s.dtype or o.count != s.count):
            raise InvalidArgument(_lib.ERR_ARG, f"allreduce: output of {o.count} {o.name}, input of {s.count} {s.name}")
        fn = self._L.ndma_allreduce if blocking else self._L.ndma_iallreduce
        return self._start(fn, (s.ptr, o.ptr, s.count, s.dtype, _op(op)), (s, o), o.obj, blocking)

    def reduce(self, buf, root=0, op="sum", out=None):
        """Reduces buf over all ranks into out (default: buf) at root."""
        return self._reduce(buf, root, op, out, True)

    def ireduce(self, buf, root=0, op="sum", out=None):
        return self._reduce(buf, root, op, out, False)

    def _reduce(self, buf, root, op, out, blocking):
        s = _Buf(buf, "reduce buffer").reducible("reduce")
        o = s if out is None else _Buf(out, "reduce output").reducible("reduce")
        if out is not None and (o.dtype != s.dtype or o.count != s.count):
            raise InvalidArgument(_lib.ERR_ARG, f"reduce: output of {o.count} {o.name}, input of {s.count} {s.name}")
        fn = self._L.ndma_reduce if blocking else self._L.ndma_ireduce
        return self._start(fn, (s.ptr, o.ptr, s.count, s.dtype, _op(op), int(root)), (s, o), o.obj, blocking)

    def reduce_scatter(self, buf, out, op="sum"):
        """buf holds size blocks of len(out) elements; block i of the
        reduction lands in rank i's out."""
        return self._reduce_scatter(buf, out, op, True)

    def ireduce_scatter(self, buf, out, op="sum"):
        return self._reduce_scatter(buf, out, op, False)

    def _reduce_scatter(self, buf, out, op, blocking):
        s = _Buf(buf, "reduce_scatter input").reducible("reduce_scatter")
        o = _Buf(out, "reduce_scatter output").reducible("reduce_scatter")
        if o.dtype != s.dtype or s.count != o.count * self.size:
            raise InvalidArgument(_lib.ERR_ARG,
                                  f"reduce_scatter: input of {s.count} {s.name}, output of {o.count} {o.name}: "
                                  f"want the input {self.size} times the output, same dtype")
        fn = self._L.ndma_reduce_scatter if blocking else self._L.ndma_ireduce_scatter
        return self._start(fn, (s.ptr, o.ptr, o.count, s.dtype, _op(op)), (s, o), o.obj, blocking)

    def bcast(self, buf, root=0):
        """Copies root's buf into every rank's buf (any dtype)."""
        return self._bcast(buf, root, True)

    def ibcast(self, buf, root=0):
        return self._bcast(buf, root, False)

    def _bcast(self, buf, root, blocking):
        b = _Buf(buf, "bcast buffer")
        fn = self._L.ndma_bcast if blocking else self._L.ndma_ibcast
        return self._start(fn, (b.ptr, b.nbytes, int(root)), (b,), b.obj, blocking)

    def allgather(self, buf, out):
        """Gathers every rank's buf into out (size blocks, block i from rank
        i) on every rank; buf None means in place (this rank's block is
        already in out)."""
        return self._allgather(buf, out, True)

    def iallgather(self, buf, out):
        return self._allgather(buf, out, False)

    def _allgather(self, buf, out, blocking):
        o = _Buf(out, "allgather output")
        if o.nbytes % self.size:
            raise InvalidArgument(_lib.ERR_ARG, f"allgather: output of {o.nbytes} bytes is not {self.size} equal blocks")
        n = o.nbytes // self.size
        s = None
        if buf is not None:
            s = _Buf(buf, "allgather input")
            if s.nbytes != n:
                raise InvalidArgument(_lib.ERR_ARG, f"allgather: input of {s.nbytes} bytes, output of {self.size} blocks of {n}")
        fn = self._L.ndma_allgather if blocking else self._L.ndma_iallgather
        return self._start(fn, (None if s is None else s.ptr, o.ptr, n), (s, o), o.obj, blocking)

    def gather(self, buf, out, root=0):
        """Gathers every rank's buf into the root's out (size blocks, block
        i from rank i); out is ignored elsewhere and may be None; buf None
        at the root means in place (its block is already in out)."""
        return self._gather(buf, out, root, True)

    def igather(self, buf, out, root=0):
        return self._gather(buf, out, root, False)

    def _gather(self, buf, out, root, blocking):
        s = None if buf is None else _Buf(buf, "gather input")
        o = None
        if self.rank == root:
            if out is None:
                raise InvalidArgument(_lib.ERR_ARG, "gather: no output at the root")
            o = _Buf(out, "gather output")
            if o.nbytes % self.size or s is not None and s.nbytes * self.size != o.nbytes:
                raise InvalidArgument(_lib.ERR_ARG, f"gather: output of {o.nbytes} bytes is not {self.size} blocks of the input")
            n = o.nbytes // self.size
        elif s is None:
            raise InvalidArgument(_lib.ERR_ARG, "gather: no input")
        else:
            n = s.nbytes
        fn = self._L.ndma_gather if blocking else self._L.ndma_igather
        return self._start(fn, (None if s is None else s.ptr, None if o is None else o.ptr, n, int(root)), (s, o),
                           None if o is None else o.obj, blocking)

    def scatter(self, buf, out, root=0):
        """Scatters the root's buf (size blocks) so that rank i gets block i
        in out; buf is ignored elsewhere and may be None; out None at the
        root means in place (its block stays in buf)."""
        return self._scatter(buf, out, root, True)

    def iscatter(self, buf, out, root=0):
        return self._scatter(buf, out, root, False)

    def _scatter(self, buf, out, root, blocking):
        o = None if out is None else _Buf(out, "scatter output")
        s = None
        if self.rank == root:
            if buf is None:
                raise InvalidArgument(_lib.ERR_ARG, "scatter: no input at the root")
            s = _Buf(buf, "scatter input")
            if s.nbytes % self.size or o is not None and o.nbytes * self.size != s.nbytes:
                raise InvalidArgument(_lib.ERR_ARG, f"scatter: input of {s.nbytes} bytes is not {self.size} blocks of the output")
            n = s.nbytes // self.size
        elif o is None:
            raise InvalidArgument(_lib.ERR_ARG, "scatter: no output")
        else:
            n = o.nbytes
        fn = self._L.ndma_scatter if blocking else self._L.ndma_iscatter
        return self._start(fn, (None if s is None else s.ptr, None if o is None else o.ptr, n, int(root)), (s, o),
                           None if o is None else o.obj, blocking)

    def alltoall(self, buf, out):
        """Sends block j of buf (size blocks) to rank j; out gets size
        blocks, block i from rank i."""
        return self._alltoall(buf, out, True)

    def ialltoall(self, buf, out):
        return self._alltoall(buf, out, False)

    def _alltoall(self, buf, out, blocking):
        s, o = _Buf(buf, "alltoall input"), _Buf(out, "alltoall output")
        if s.nbytes != o.nbytes or o.nbytes % self.size:
            raise InvalidArgument(_lib.ERR_ARG, f"alltoall: input of {s.nbytes} bytes and output of {o.nbytes}: want {self.size} equal blocks each")
        fn = self._L.ndma_alltoall if blocking else self._L.ndma_ialltoall
        return self._start(fn, (s.ptr, o.ptr, o.nbytes // self.size), (s, o), o.obj, blocking)

    def region(self, nbytes, stripe=0):
        """A Region of nbytes in the pool (collective: see Region)."""
        return Region(self, nbytes, stripe)

    def barrier(self):
        """Returns once every rank has entered the barrier."""
        return self._start(self._L.ndma_barrier, (), (), None, True)

    def ibarrier(self):
        return self._start(self._L.ndma_ibarrier, (), (), None, False)


_OPTIMS = {"sgd": _lib.OPTIM_SGD, "adam": _lib.OPTIM_ADAM}


class Region:
    """Memory in the switch's pool, lent by memory nodes (ndma memd),
    striped over them and shared by the ranks of comm: any rank reads and
    writes any byte. Creating one is collective (every rank, same
    arguments; rank 0 creates it, the others open it), and so is free().
    Reads, writes and optimizer steps are each rank's own and may run from
    several threads at once. A fresh region reads as zeros. The region's
    key stays inside the library.

    stripe is the interleave unit over the memory nodes in bytes (a
    multiple of 8; 0: 64 KiB). The region is freed with its communicator
    if not before."""

    def __init__(self, comm, nbytes, stripe=0):
        self._comm, self._L = comm, comm._L
        h = ctypes.c_uint64(0)
        _check(self._L.ndma_region_alloc(comm._handle(), int(nbytes), int(stripe), ctypes.byref(h)))
        self._h = h.value
        n = ctypes.c_uint64(0)
        _check(self._L.ndma_region_size(self._h, ctypes.byref(n)))
        self.size = n.value

    def _handle(self):
        if self._comm.closed:
            self._h = 0
        if not self._h:
            raise Closed(_lib.ERR_CLOSED, "ndma: the region is freed, or its communicator closed")
        return self._h

    def free(self):
        """Frees the region (collective). Freeing twice is fine."""
        if self._comm.closed:
            self._h = 0
        h, self._h = self._h, 0
        if h:
            _check(self._L.ndma_region_free(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.free()

    def write(self, offset, data):
        """Writes the buffer data (numpy array or CPU tensor, any dtype) at
        byte offset."""
        b = _Buf(data, "region write buffer")
        _check(self._L.ndma_region_write(self._handle(), int(offset), b.ptr, b.nbytes))

    def read(self, offset, out):
        """Reads len(out) bytes' worth at byte offset into out; returns out."""
        b = _Buf(out, "region read buffer")
        _check(self._L.ndma_region_read(self._handle(), int(offset), b.ptr, b.nbytes))
        return out

    def state_stride(self, nbytes):
        """The smallest optimizer state stride for nbytes of parameters: a
        parameter at offset o has its first moment at o + stride and Adam's
        second moment at o + 2*stride."""
        s = ctypes.c_uint64(0)
        _check(self._L.ndma_region_state_stride(self._handle(), int(nbytes), ctypes.byref(s)))
        return s.value

    def optim_step(self, offset, stride, grads, *, algo="adam", step=1, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                   momentum=0.9, weight_decay=0.0):
        """Sends float32 gradients for the parameters at byte offset; the
        memory nodes update the parameters and their state in place:
        algo "adam" (step counts from 1, for bias correction) or "sgd" with
        momentum (PyTorch's rule, no dampening)."""
        g = _Buf(grads, "gradients")
        if g.dtype != _lib.FLOAT32:
            raise InvalidArgument(_lib.ERR_ARG, f"gradients: dtype {g.name}; optimizer steps take float32")
        try:
            a = _OPTIMS[algo]
        except KeyError:
            raise InvalidArgument(_lib.ERR_ARG, f"optimizer {algo!r}: want one of {', '.join(_OPTIMS)}") from None
        o = _lib.Optim()
        self._L.ndma_optim_init(ctypes.byref(o))
        o.algo, o.step, o.lr, o.eps, o.weight_decay = a, int(step), float(lr), float(eps), float(weight_decay)
        o.beta1, o.beta2 = (float(momentum), 0.0) if a == _lib.OPTIM_SGD else (float(betas[0]), float(betas[1]))
        _check(self._L.ndma_region_optim_step(self._handle(), int(offset), int(stride), ctypes.byref(o), g.ptr, g.count))
