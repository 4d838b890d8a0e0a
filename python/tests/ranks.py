"""One rank of a multi-rank Python test: `python3 ranks.py SCENARIO`, with
the launch in the environment (NDMA_RANK, NDMA_SIZE, NDMA_SWITCH,
NDMA_TOKEN, NDMA_JOB). Prints "ok" when every check passed; raises
otherwise."""

import faulthandler
import hashlib
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import numpy as np  # noqa: E402

import ndma  # noqa: E402

DTYPES = [np.float32, np.float64, np.int32, np.int64]
OPS = {"sum": np.sum, "prod": np.prod, "min": np.min, "max": np.max}


def value(rank, n, dtype):
    # Small integers: float sums and products are exact in any order.
    return ((np.arange(n) * 7 + rank * 3) % 5 - 1).astype(dtype)


def expected(size, n, dtype, op):
    return OPS[op](np.stack([value(r, n, dtype) for r in range(size)]), axis=0).astype(dtype)


def numpy_scenario(comm):
    r, s = comm.rank, comm.size
    for dtype in DTYPES:
        for op in OPS:
            for n in (0, 1, 7, 1000, 30001):
                want = expected(s, n, dtype, op)
                x = value(r, n, dtype)
                out = comm.allreduce(x, op)
                assert out is x and np.array_equal(x, want), (dtype, op, n)
                x, y = value(r, n, dtype), np.zeros(n, dtype)
                comm.allreduce(x, op, out=y)
                assert np.array_equal(y, want) and np.array_equal(x, value(r, n, dtype))
                for root in range(s):
                    x = value(r, n, dtype)
                    comm.reduce(x, root=root, op=op)
                    if r == root:
                        assert np.array_equal(x, want), ("reduce", dtype, op, n, root)
                big = np.concatenate([value(r, n * s, dtype)]) if n else np.zeros(0, dtype)
                part = np.zeros(n, dtype)
                comm.reduce_scatter(big, part, op)
                assert np.array_equal(part, expected(s, n * s, dtype, op)[r * n:(r + 1) * n]), ("reduce_scatter", dtype, op, n)
    for n in (0, 1, 13, 100003):
        for root in range(s):
            b = np.arange(n, dtype=np.uint8) + root if r == root else np.zeros(n, np.uint8)
            comm.bcast(b, root)
            assert np.array_equal(b, np.arange(n, dtype=np.uint8) + root), ("bcast", n, root)
        mine = np.full(n, r, dtype=np.int16)
        out = np.zeros(n * s, np.int16)
        comm.allgather(mine, out)
        assert np.array_equal(out, np.repeat(np.arange(s, dtype=np.int16), n)), ("allgather", n)
        out = np.zeros(n * s, np.int16)
        out[r * n:(r + 1) * n] = r
        comm.allgather(None, out)
        assert np.array_equal(out, np.repeat(np.arange(s, dtype=np.int16), n)), ("allgather in place", n)
        for root in range(s):
            out = np.zeros(n * s, np.int16) if r == root else None
            comm.gather(mine, out, root)
            if r == root:
                assert np.array_equal(out, np.repeat(np.arange(s, dtype=np.int16), n)), ("gather", n, root)
            blocks = np.repeat(np.arange(s, dtype=np.int16) * 10 + root, n)
            part = np.zeros(n, np.int16)
            comm.scatter(blocks if r == root else None, part, root)
            assert np.array_equal(part, np.full(n, r * 10 + root, np.int16)), ("scatter", n, root)
        send = np.repeat(np.arange(s, dtype=np.int16) + 100 * r, n)
        got = np.zeros(n * s, np.int16)
        comm.alltoall(send, got)
        assert np.array_equal(got, np.repeat(np.arange(s, dtype=np.int16) * 100 + r, n)), ("alltoall", n)
    comm.barrier()
    # Non-blocking: several at once, completed out of order.
    a = value(r, 5000, np.float32)
    b = np.arange(5000, dtype=np.int64) if r == 0 else np.zeros(5000, np.int64)
    g = np.zeros(4 * s, np.float64)
    reqs = [comm.iallreduce(a, "max"), comm.ibcast(b, 0), comm.iallgather(np.full(4, r, np.float64), g), comm.ibarrier()]
    while not reqs[0].test():
        time.sleep(0.0005)
    for q in reversed(reqs[1:]):
        q.wait()
    assert all(q.done for q in reqs)
    assert np.array_equal(a, expected(s, 5000, np.float32, "max"))
    assert np.array_equal(b, np.arange(5000, dtype=np.int64))
    assert np.array_equal(g, np.repeat(np.arange(s, dtype=np.float64), 4))


def torch_scenario(comm):
    import torch

    r, s = comm.rank, comm.size
    for dtype in (torch.float32, torch.float64, torch.int32, torch.int64):
        t = torch.full((3, 333), r + 1, dtype=dtype)
        comm.allreduce(t)
        assert torch.equal(t, torch.full((3, 333), s * (s + 1) // 2, dtype=dtype)), dtype
        req = comm.iallreduce(t, "min")
        assert req.wait() is t
        assert torch.equal(t, torch.full((3, 333), s * (s + 1) // 2, dtype=dtype))
    t = torch.arange(1000, dtype=torch.float16) if r == 1 else torch.zeros(1000, dtype=torch.float16)
    comm.bcast(t, 1)  # bcast moves bytes: any dtype
    assert torch.equal(t, torch.arange(1000, dtype=torch.float16))
    out = torch.zeros(s, 10, dtype=torch.bfloat16)
    comm.allgather(torch.full((10,), r, dtype=torch.bfloat16), out)
    assert torch.equal(out, torch.arange(s, dtype=torch.bfloat16).repeat_interleave(10).reshape(s, 10))


def dead_scenario(comm):
    # Rank 1 dies without a word; the others' next collective fails
    # within the communicator's timeout, naming the cause.
    if comm.rank == 1:
        os._exit(0)
    x = np.ones(1000, np.float32)
    t0 = time.monotonic()
    try:
        comm.allreduce(x)
    except (ndma.RankError, ndma.Timeout) as e:
        took = time.monotonic() - t0
        limit = float(os.environ["NDMA_TIMEOUT"].rstrip("s"))
        assert took < limit + 5, f"failed after {took:.1f}s, timeout {limit}s"
        print(f"raised {type(e).__name__} after {took:.1f}s: {e}", file=sys.stderr)
        return
    raise AssertionError("an allreduce with a dead rank returned")


def dead_torch_scenario(comm):
    # Rank 1 dies once both ranks have set up DDP with the NDMA hook and
    # DDP over the ndma backend. On rank 0 a call of the backend raises
    # ndma's own error, and a backward pass of either model fails with an
    # error that names it (DDP's C++ side wraps it in a RuntimeError).
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ndma.torch

    r = comm.rank
    dist.init_process_group("ndma", init_method="file://" + os.environ["NDMA_TEST_STORE"], rank=r, world_size=comm.size)
    gloo = dist.new_group(backend="gloo")
    torch.manual_seed(0)
    hooked = DDP(torch.nn.Linear(64, 8), process_group=gloo)
    state = ndma.torch.HookState(comm)
    hooked.register_comm_hook(state, ndma.torch.comm_hook)
    over = DDP(torch.nn.Linear(64, 8))  # over the default group: ndma
    dist.barrier(group=gloo)
    if r == 1:
        os._exit(0)
    x = torch.randn(4, 64)
    try:
        hooked(x).sum().backward()
        raise AssertionError("a backward pass through the hook with a dead rank returned")
    except RuntimeError as e:
        assert "RankError" in str(e) and "rank 1" in str(e), f"hook: {e}"
        print(f"hook raised: {str(e).splitlines()[0]}", file=sys.stderr)
    try:
        dist.all_reduce(torch.ones(10))
        raise AssertionError("an all_reduce with a dead rank returned")
    except ndma.RankError as e:
        assert "rank 1" in str(e), e
        print(f"backend raised {type(e).__name__}: {e}", file=sys.stderr)
    try:
        over(x).sum().backward()
        raise AssertionError("a backward pass over the backend with a dead rank returned")
    except RuntimeError as e:
        assert "RankError" in str(e), f"backend DDP: {e}"
        print(f"backend DDP raised: {str(e).splitlines()[0]}", file=sys.stderr)
    state.close()


def mismatched_allreduce(comm, algo, reason):
    # Rank 1's array is longer than the others': every rank's allreduce
    # raises at once, none hangs.
    comm.set_algo("allreduce", algo)
    x = np.ones(1000 + (8 if comm.rank == 1 else 0), np.float32)
    t0 = time.monotonic()
    try:
        comm.allreduce(x)
    except ndma.InvalidArgument as e:
        took = time.monotonic() - t0
        assert took < 5, f"raised after {took:.1f}s"
        assert reason in str(e), str(e)
        print(f"raised {type(e).__name__} after {took:.2f}s: {e}", file=sys.stderr)
        return
    raise AssertionError(f"a {algo} allreduce of mismatched arrays returned")


def mismatch_scenario(comm):
    # In network the switch refuses the aggregation for every member,
    # naming the problem.
    mismatched_allreduce(comm, "innet", "differ")


def mismatch_hier_scenario(comm):
    # Ranks of one host sharing memory: the rank that sees other
    # arguments in the host's segment fails the call on every rank.
    mismatched_allreduce(comm, "auto", "other arguments")


def mismatch_ring_scenario(comm):
    # With the host ring, the ranks that do not exchange a message with
    # rank 1 learn of the mismatch from its neighbours' abort messages.
    mismatched_allreduce(comm, "ring", "")


def ddp_scenario(comm):
    # The same training, DDP's own Gloo allreduce against the NDMA hook:
    # with 2 ranks both sum two numbers and halve them, so the parameters
    # must come out bitwise equal.
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ndma.torch

    dist.init_process_group("gloo", init_method="file://" + os.environ["NDMA_TEST_STORE"], rank=comm.rank, world_size=comm.size)

    def train(hook):
        torch.manual_seed(0)
        # 5 MB of parameters in 1 MB buckets: several per step.
        net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(5)], torch.nn.Linear(512, 10))
        model = DDP(net, bucket_cap_mb=1)
        state = None
        if hook:
            state = ndma.torch.HookState(comm)
            model.register_comm_hook(state, ndma.torch.comm_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + comm.rank)
        for _ in range(6):
            x, y = torch.randn(16, 512, generator=g), torch.randint(0, 10, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        if state:
            assert state.calls >= 18, f"{state.calls} buckets through NDMA in 6 steps"
            state.close()
        return [p.detach().clone() for p in model.parameters()]

    gloo, hooked = train(False), train(True)
    for a, b in zip(gloo, hooked):
        assert torch.equal(a, b), f"parameters differ by up to {(a - b).abs().max()}"
    dist.destroy_process_group()


def backend_scenario(comm):
    # torch.distributed with the ndma backend: each call checked, then
    # DDP over it against DDP over Gloo, bitwise (2 ranks).
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ndma.torch  # noqa: F401  (registers the backend)

    r, s = comm.rank, comm.size
    dist.init_process_group("ndma", init_method="file://" + os.environ["NDMA_TEST_STORE"], rank=r, world_size=s)
    assert dist.get_backend() == "ndma"
    t = torch.full((1000,), float(r + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((1000,), float(s * (s + 1) // 2)))
    t = torch.full((10,), r, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    assert torch.equal(t, torch.full((10,), s - 1, dtype=torch.int64))
    b = torch.arange(100, dtype=torch.float64) if r == 1 else torch.zeros(100, dtype=torch.float64)
    dist.broadcast(b, src=1)
    assert torch.equal(b, torch.arange(100, dtype=torch.float64))
    outs = [torch.zeros(2, 3) for _ in range(s)]
    dist.all_gather(outs, torch.full((2, 3), float(r)))
    for i, o in enumerate(outs):
        assert torch.equal(o, torch.full((2, 3), float(i))), ("all_gather", i, o)
    out = torch.zeros(4)
    dist.reduce_scatter(out, [torch.full((4,), float(r * 10 + i)) for i in range(s)])
    assert torch.equal(out, torch.full((4,), float(sum(q * 10 + r for q in range(s))))), ("reduce_scatter", out)
    w = dist.all_reduce(torch.ones(5), async_op=True)
    w.wait()
    dist.barrier()
    try:
        dist.all_reduce(torch.ones(3), op=dist.ReduceOp.BAND)
        raise AssertionError("BAND went through")
    except ndma.InvalidArgument as e:
        assert "reduction BAND" in str(e), e

    gloo = dist.new_group(backend="gloo")

    def train(group):
        torch.manual_seed(0)
        net = torch.nn.Sequential(*[torch.nn.Linear(512, 512) for _ in range(3)], torch.nn.Linear(512, 10))
        model = DDP(net, bucket_cap_mb=1, process_group=group)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(100 + r)
        for _ in range(4):
            x, y = torch.randn(16, 512, generator=g), torch.randint(0, 10, (16,), generator=g)
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return [p.detach().clone() for p in model.parameters()]

    want_local = os.environ.get("NDMA_TEST_LOCAL_SIZE")
    if want_local:
        backend = dist.group.WORLD  # the ProcessGroupNDMA itself
        assert backend.comm.local_size == int(want_local), ("the backend's ranks sharing memory", backend.comm.local_size)
    if s == 2:
        for a, b in zip(train(gloo), train(None)):
            assert torch.equal(a, b), f"DDP over ndma differs from DDP over gloo by {(a - b).abs().max()}"
    dist.destroy_process_group()


def deterministic_scenario(comm):
    # NDMA_DETERMINISTIC=1 (set by the test): the switch reduces in rank
    # order, so the same training run twice gives the same parameters and
    # losses bit for bit, on every rank. Also reports (without asserting)
    # what Gloo and NDMA's default arrival-order reduction give.
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import ndma.torch

    dist.init_process_group("gloo", init_method="file://" + os.environ["NDMA_TEST_STORE"], rank=comm.rank, world_size=comm.size)

    def train(hook):
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        model = DDP(net, bucket_cap_mb=0.05)
        state = None
        if hook:
            state = ndma.torch.HookState(comm)
            model.register_comm_hook(state, ndma.torch.comm_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        g = torch.Generator().manual_seed(7 + comm.rank)
        losses = []
        for _ in range(8):
            x, y = torch.randn(32, 64, generator=g), torch.randint(0, 10, (32,), generator=g)
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        if state:
            state.close()
        h = hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).hexdigest()
        return h, losses

    (h1, l1), (h2, l2) = train(True), train(True)
    assert h1 == h2 and l1 == l2, f"two runs in deterministic mode differ: {h1} {h2}"
    hashes = [None] * comm.size
    dist.all_gather_object(hashes, h1)
    assert len(set(hashes)) == 1, f"ranks differ: {hashes}"
    g1, g2 = train(False)[0], train(False)[0]
    print(f"gloo twice: {'equal' if g1 == g2 else 'different'}", file=sys.stderr)
    dist.destroy_process_group()


def expect_raises(cls, f, *what):
    try:
        f()
    except cls as e:
        for w in what:
            assert w in str(e), f"{cls.__name__} {e!r} does not say {w!r}"
        return e
    raise AssertionError(f"no {cls.__name__} raised ({what})")


def adam_ref(p, m, v, g, t, lr, b1, b2, eps):
    # ndma.h's Adam rule, in float64.
    m[:] = b1 * m + (1 - b1) * g
    v[:] = b2 * v + (1 - b2) * g * g
    p[:] = p - lr * (m / (1 - b1 ** t)) / (np.sqrt(v / (1 - b2 ** t)) + eps)


def region_scenario(comm):
    r, s = comm.rank, comm.size
    # Shared memory: every rank writes its slice, every rank reads all.
    n = 50000  # uint32 values per rank, over stripes and both memory nodes
    with comm.region(4 * n * s, stripe=4096) as reg:
        assert reg.size == 4 * n * s
        reg.write(4 * n * r, np.arange(n, dtype=np.uint32) + r * 1000003)
        comm.barrier()
        got = reg.read(0, np.zeros(n * s, np.uint32))
        want = np.concatenate([np.arange(n, dtype=np.uint32) + q * 1000003 for q in range(s)])
        assert np.array_equal(got, want)
        expect_raises(ndma.InvalidArgument, lambda: reg.read(reg.size - 4, np.zeros(2, np.uint32)), "outside the region")
        expect_raises(ndma.InvalidArgument, lambda: reg.write(0, [1, 2]), "numpy array")
        comm.barrier()

    # Optimizer steps applied by the memory nodes, each rank on its own
    # part of one region, against the rule in float64.
    k = 3001
    reg = comm.region(4 * k * s * 3 + (1 << 20), stripe=4096)
    stride = reg.state_stride(4 * k * s)
    assert stride % 4096 == 0 and stride >= 4 * k * s and 3 * stride <= reg.size
    rng = np.random.default_rng(r)
    p = rng.standard_normal(k).astype(np.float32)
    reg.write(4 * k * r, p)
    ref_p, ref_m, ref_v = p.astype(np.float64), np.zeros(k), np.zeros(k)
    for t in range(1, 4):
        g = rng.standard_normal(k).astype(np.float32)
        reg.optim_step(4 * k * r, stride, g, algo="adam", step=t, lr=0.01, betas=(0.9, 0.999), eps=1e-8)
        adam_ref(ref_p, ref_m, ref_v, g.astype(np.float64), t, 0.01, 0.9, 0.999, 1e-8)
    got = reg.read(4 * k * r, np.zeros(k, np.float32))
    assert np.allclose(got, ref_p, rtol=1e-5, atol=1e-6), f"adam in the pool differs from the rule by {np.max(np.abs(got - ref_p))}"
    m = reg.read(4 * k * r + stride, np.zeros(k, np.float32))
    assert np.allclose(m, ref_m, rtol=1e-5, atol=1e-6), "first moment"
    g32 = np.ones(k, np.float32)
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(0, stride, g32.astype(np.float64)), "float32")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(0, stride, g32, algo="lamb"), "lamb")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(0, stride + 4, g32), "stride")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(2, stride, g32), "offset")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(0, stride, g32, lr=float("nan")), "optimizer")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(0, stride, g32, step=0), "step")
    expect_raises(ndma.InvalidArgument, lambda: reg.optim_step(reg.size - 4 * k, stride, g32), "outside the region")
    reg.free()
    reg.free()  # twice is fine
    expect_raises(ndma.Closed, lambda: reg.read(0, np.zeros(1, np.uint32)), "freed")

    # A region larger than the pool fails on every rank, with what is short.
    expect_raises(ndma.PoolError, lambda: comm.region(1 << 40), "pool")
    # The communicator still works, and frees what is left at close.
    left = comm.region(1 << 20)
    left.write(0, np.ones(4, np.float32))
    comm.barrier()


def offload_scenario(comm):
    # OffloadOptimizer against PyTorch's own optimizers applied to the
    # average of every rank's gradients, in one process.
    import torch

    import ndma.torch

    def net(seed):
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))

    def batch(rank, step):
        g = torch.Generator().manual_seed(1000 * step + rank)
        return torch.randn(8, 20, generator=g), torch.randint(0, 10, (8,), generator=g)

    lossf = torch.nn.CrossEntropyLoss()
    for algo in ("adam", "sgd"):
        kw = dict(lr=0.01, betas=(0.9, 0.999), eps=1e-8) if algo == "adam" else dict(lr=0.05, momentum=0.9)
        model = net(comm.rank)  # rank 0's parameters win
        # 2 kB chunks per rank: several chunks, and padding at the end.
        opt = ndma.torch.OffloadOptimizer(model.parameters(), comm, algo=algo, chunk_elems=500, **kw)
        assert opt.chunks > 1, opt.chunks
        ref = net(0)
        if algo == "adam":
            ropt = torch.optim.Adam(ref.parameters(), lr=kw["lr"], betas=kw["betas"], eps=kw["eps"])
        else:
            ropt = torch.optim.SGD(ref.parameters(), lr=kw["lr"], momentum=kw["momentum"])
        for step in range(5):
            x, y = batch(comm.rank, step)
            opt.zero_grad()
            lossf(model(x), y).backward()
            opt.step()
            ropt.zero_grad()
            grads = None
            for q in range(comm.size):
                ref.zero_grad()
                x, y = batch(q, step)
                lossf(ref(x), y).backward()
                gq = [p.grad.clone() for p in ref.parameters()]
                grads = gq if grads is None else [a + b for a, b in zip(grads, gq)]
            for p, gsum in zip(ref.parameters(), grads):
                p.grad = gsum / comm.size
            ropt.step()
        for a, b in zip(model.parameters(), ref.parameters()):
            assert torch.allclose(a, b, rtol=1e-4, atol=1e-5), f"{algo}: off by {(a - b).abs().max()}"
        h = np.frombuffer(hashlib.sha256(b"".join(p.detach().numpy().tobytes() for p in model.parameters())).digest(), np.uint8)
        all_h = np.zeros(32 * comm.size, np.uint8)
        comm.allgather(h.copy(), all_h)
        assert all(np.array_equal(all_h[32 * q:32 * q + 32], h) for q in range(comm.size)), "ranks' parameters differ"
        opt.close()
    bad = torch.nn.Linear(4, 4).double()
    expect_raises(ndma.InvalidArgument, lambda: ndma.torch.OffloadOptimizer(bad.parameters(), comm), "float32")


def hierarchy_scenario(comm):
    # Keyword arguments: a communicator as two hosts of two ranks each
    # (host_id), one with the hierarchy off; each checked with a few
    # collectives.
    r, s = comm.rank, comm.size
    kw = dict(token=os.environ["NDMA_TOKEN"], insecure=os.environ.get("NDMA_INSECURE") == "1", timeout=60)
    for name, hier, host, local in (("two-hosts", "auto", f"host {r // 2}", 2), ("off", "off", None, 1)):
        with ndma.Communicator(r, s, os.environ["NDMA_SWITCH"], job=os.environ["NDMA_JOB"] + "." + name,
                               hierarchy=hier, host_id=host, **kw) as c:
            assert c.local_size == local, (name, c.local_size)
            x = np.arange(30001, dtype=np.float64) * (r + 1)
            c.allreduce(x)
            assert np.array_equal(x, np.arange(30001, dtype=np.float64) * (s * (s + 1) // 2)), name
            out = np.zeros((s, 5), np.int32)
            c.allgather(np.full(5, r, np.int32), out)
            assert np.array_equal(out, np.repeat(np.arange(s, dtype=np.int32), 5).reshape(s, 5)), name
            b = np.arange(1000, dtype=np.int64) if r == s - 1 else np.zeros(1000, np.int64)
            c.bcast(b, root=s - 1)
            assert np.array_equal(b, np.arange(1000, dtype=np.int64)), name
            y = np.full(7, float(r), np.float32)
            c.reduce(y, root=1, op="max")
            assert r != 1 or np.array_equal(y, np.full(7, s - 1, np.float32)), name
            c.barrier()


SCENARIOS = {"hierarchy": hierarchy_scenario, "region": region_scenario, "offload": offload_scenario, "deterministic": deterministic_scenario, "backend": backend_scenario, "numpy": numpy_scenario, "torch": torch_scenario, "dead": dead_scenario, "dead_torch": dead_torch_scenario, "ddp": ddp_scenario, "mismatch": mismatch_scenario, "mismatch_hier": mismatch_hier_scenario, "mismatch_ring": mismatch_ring_scenario}


def main():
    name = sys.argv[1]
    # A rank stuck past the harness's patience prints every thread's
    # stack and exits, so that a hang shows where it is.
    faulthandler.dump_traceback_later(float(os.environ.get("NDMA_TEST_STACKS_AFTER", "150")), exit=True)
    with ndma.Communicator() as comm:
        assert comm.rank == int(os.environ["NDMA_RANK"]) and comm.size == int(os.environ["NDMA_SIZE"])
        want_local = os.environ.get("NDMA_TEST_LOCAL_SIZE")
        if want_local:
            assert comm.local_size == int(want_local), ("ranks sharing memory", comm.local_size, want_local)
        SCENARIOS[name](comm)
    print("ok")


if __name__ == "__main__":
    main()
