#!/usr/bin/python3
"""Times one OffloadOptimizer step and its pieces on the ranks of a launch
(ndma testbed run), for a flat float32 parameter vector of --params
elements: the whole step, the reduce-scatter and the allgather alone and
both at once, DDP's in-network allreduce of the same bytes, and the
optimizer steps and reads of this rank's shares alone. Rank 0 prints the
medians of --iters runs (milliseconds). Needs memory nodes at the switch
(ndma testbed up --memnodes 2).

    sudo ndma testbed run -- /usr/bin/python3 examples/train/offload.py --params 3716106
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import ndma  # noqa: E402
import ndma.torch  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--params", type=int, default=3716106, help="float32 parameters")
    p.add_argument("--chunk", type=int, default=0, help="OffloadOptimizer chunk_elems (0: its default)")
    p.add_argument("--iters", type=int, default=3)
    a = p.parse_args()
    comm = ndma.Communicator(algorithms={"reducescatter": "innet", "allgather": "innet", "allreduce": "innet"})
    param = torch.nn.Parameter(torch.zeros(a.params))
    kw = {"chunk_elems": a.chunk} if a.chunk else {}
    opt = ndma.torch.OffloadOptimizer([param], comm, algo="adam", **kw)
    param.grad.fill_(1.0)
    share = torch.zeros(opt.padded // comm.size)
    other = torch.zeros(opt.padded)

    def timed(name, f):
        comm.barrier()
        ts = []
        for _ in range(a.iters):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        comm.barrier()
        if comm.rank == 0:
            print(f"{name:<32} {np.median(ts) * 1e3:8.0f} ms", flush=True)

    def both():
        r = comm.ireduce_scatter(opt.grad, share)
        g = comm.iallgather(None, other)
        r.wait()
        g.wait()

    def steps():
        for c in range(opt.chunks):
            opt.region.optim_step(opt._offset(c), opt.stride, share[:opt.k], step=1)

    def reads():
        for c in range(opt.chunks):
            opt.region.read(opt._offset(c), share[:opt.k])

    if comm.rank == 0:
        print(f"{comm.size} ranks, {a.params} parameters ({opt.padded * 4 / 1e6:.1f} MB padded), "
              f"{opt.chunks} chunks of {opt.k} elements per rank")
    timed("offload step", opt.step)
    timed("reduce-scatter (innet)", lambda: comm.reduce_scatter(opt.grad, share))
    timed("allgather (innet)", lambda: comm.allgather(None, other))
    timed("reduce-scatter + allgather", both)
    timed("allreduce (innet, as DDP)", lambda: comm.allreduce(opt.grad))
    timed("optimizer steps of my shares", steps)
    timed("reads of my shares", reads)
    opt.close()
    comm.close()


if __name__ == "__main__":
    main()
