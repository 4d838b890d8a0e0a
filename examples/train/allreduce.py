#!/usr/bin/python3
"""The allreduce DDP's gradient exchange makes, alone: --count float32s
summed over the ranks through ndma.Communicator (launch from the
environment, as `ndma testbed run` gives it), --iters times each in
place, out of place, and after a 0.2 s pause (as between training steps).
Rank 0 prints each call's seconds.

    sudo ndma testbed run -- /usr/bin/python3 examples/train/allreduce.py --algo innet
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))

import numpy as np  # noqa: E402

import ndma  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--count", type=int, default=3716106, help="float32 elements (default: the training MLP's gradients)")
    p.add_argument("--iters", type=int, default=6)
    p.add_argument("--algo", default="innet", help="allreduce algorithm (innet, ring, ...)")
    a = p.parse_args()
    with ndma.Communicator(algorithms={"allreduce": a.algo}) as c:
        x, y = np.ones(a.count, np.float32), np.zeros(a.count, np.float32)
        for mode in ("in place", "out of place", "after a pause"):
            ts = []
            for _ in range(a.iters):
                c.barrier()
                if mode == "after a pause":
                    time.sleep(0.2)
                t0 = time.perf_counter()
                if mode == "out of place":
                    c.allreduce(x, out=y)
                else:
                    c.allreduce(x)
                ts.append(time.perf_counter() - t0)
            if c.rank == 0:
                print(f"{mode}: " + " ".join(f"{t:.3f}" for t in ts) + " s", flush=True)


if __name__ == "__main__":
    main()
