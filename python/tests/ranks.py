"""One rank of a multi-rank Python test: `python3 ranks.py SCENARIO`, with
the launch in the environment (NDMA_RANK, NDMA_SIZE, NDMA_SWITCH,
NDMA_TOKEN, NDMA_JOB). Prints "ok" when every check passed; raises
otherwise."""

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


SCENARIOS = {"numpy": numpy_scenario, "torch": torch_scenario, "dead": dead_scenario}


def main():
    name = sys.argv[1]
    with ndma.Communicator() as comm:
        assert comm.rank == int(os.environ["NDMA_RANK"]) and comm.size == int(os.environ["NDMA_SIZE"])
        SCENARIOS[name](comm)
    print("ok")


if __name__ == "__main__":
    main()
