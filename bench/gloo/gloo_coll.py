"""One collective with PyTorch's Gloo backend, timed like `ndma bench coll`.

Run once per host of an NDMA testbed (`ndma bench suite --gloo` starts it
through `testbed run`): the rank and the world size come from NDMA_RANK
and NDMA_SIZE, the rendezvous address from the command line. Rank 0
prints one JSON row in bench coll's format (algo "gloo"); every call is
preceded by a Gloo barrier, as NDMA's rows are by theirs.

usage: gloo_coll.py MASTER_ADDR:PORT IFACE OP SIZE ITERS WARMUP
"""

import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    master, iface, op, size, iters, warmup = sys.argv[1:7]
    size, iters, warmup = int(size), int(iters), int(warmup)
    rank, world = int(os.environ["NDMA_RANK"]), int(os.environ["NDMA_SIZE"])
    # Gloo binds to the interface of the testbed's subnet, not to the
    # address the host name resolves to.
    os.environ["GLOO_SOCKET_IFNAME"] = iface
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://" + master, rank=rank, world_size=world)
    n = max(size // 4, 1)  # float32 elements: size bytes per rank
    buf = torch.ones(n, dtype=torch.float32)
    out = [torch.empty(n, dtype=torch.float32) for _ in range(world)]

    def call():
        if op == "bcast":
            dist.broadcast(buf, 0)
        elif op == "allreduce":
            dist.all_reduce(buf)
        elif op == "reduce":
            dist.reduce(buf, 0)
        elif op == "allgather":
            dist.all_gather(out, buf)
        elif op == "barrier":
            dist.barrier()
        else:
            raise SystemExit("gloo_coll.py: unknown operation " + op)

    times = []
    timed_from = 0
    for i in range(warmup + iters):
        if i == warmup:
            timed_from = time.time_ns()  # the window the fidelity monitor judges
        dist.barrier()
        t0 = time.perf_counter()
        call()
        t = time.perf_counter() - t0
        if i >= warmup:
            times.append(t)
    timed_to = time.time_ns()
    # As bench coll: each rank's mean call time; the row's avg is their
    # mean over ranks, min and max the fastest and slowest rank's.
    mine = torch.tensor([sum(times) / len(times) * 1e6], dtype=torch.float64)
    means = [torch.zeros(1, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(means, mine)
    if rank == 0:
        us = [m.item() for m in means]
        print(json.dumps({"op": op, "algo": "gloo", "ranks": world, "size": 0 if op == "barrier" else size,
                          "avg_us": sum(us) / len(us), "min_us": min(us), "max_us": max(us),
                          "iters": iters, "sync": "gloo",
                          "timed_from_ns": timed_from, "timed_to_ns": timed_to}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
