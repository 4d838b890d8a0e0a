#!/usr/bin/python3
"""Data-parallel training of an MLP on MNIST, the gradients averaged by
one of:

  gloo          PyTorch's DistributedDataParallel (DDP) with its own Gloo
                backend (ring allreduce over TCP)
  ndma          DDP, the gradients through NDMA in the network (allreduce
                algorithm innet: one aggregation through the switch), with
                ndma.torch's comm hook
  ndma-ring     DDP with NDMA's host ring allreduce, through the same hook
  ndma-offload  no DDP: the optimizer lives in the memory pool
                (ndma.torch.OffloadOptimizer). The gradients are
                reduce-scattered through the switch, the memory nodes
                apply the step to the parameters and the optimizer state
                they hold, and the new parameters are allgathered; the
                ranks keep no optimizer state. Needs memory nodes
                (`ndma testbed up --memnodes N`).

--optimizer picks SGD with momentum 0.9 (PyTorch's rule) or Adam, the
same rule for every backend (the memory nodes apply the same update as
torch.optim's, in float32).

One process per rank, the launch in the environment (NDMA_RANK/NDMA_SIZE
as `ndma testbed run` sets them, or torchrun's RANK/WORLD_SIZE), every
rank meeting in a torch.distributed FileStore at --store (a shared file
system: the testbed's hosts share the machine's). Rank 0 writes JSON
Lines to --out: one record per step (loss, step time, and the compute
in it: forward and backward until the last gradient is computed), per
epoch (test accuracy, samples/s, median step and compute, a hash of the
parameters on every rank) and a summary (samples/s, the fastest and
slowest step, the ranks' CPU in the training loops summed, and the
wall-clock nanoseconds they began and ended: ndma bench suite --ddp
reads it). Data: the MNIST export of examples/train/export (--data).

Each rank needs the launch in its environment: NDMA_RANK, NDMA_SIZE,
NDMA_SWITCH, NDMA_JOB and its credential (NDMA_CREDENTIAL, the directory
of `ndma fabric init DIR --job JOB --ranks N`) with the fabric token
(NDMA_TOKEN). examples/train/local.sh does all of it on one machine
(a switch on loopback, RANKS ranks); examples/train/run.sh on the
testbed, one rank per host:

    examples/train/local.sh /tmp/train-local
    NDMA_RANK=0 NDMA_SIZE=2 NDMA_SWITCH=127.0.0.1:7571 NDMA_JOB=train NDMA_CREDENTIAL=fab \
        NDMA_TOKEN="$(cat fab/token)" python3 examples/train/train.py --backend ndma \
        --data /tmp/mnist --store /tmp/s --out ndma.jsonl   # and the same with NDMA_RANK=1
"""

import argparse
import hashlib
import json
import os
import resource
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

BACKENDS = ("gloo", "ndma", "ndma-ring", "ndma-offload")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, required=True)
    p.add_argument("--data", required=True, help="directory of the MNIST export")
    p.add_argument("--store", required=True, help="file for the ranks' rendezvous (torch FileStore; must not exist yet)")
    p.add_argument("--out", required=True, help="JSON Lines file rank 0 writes")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128, help="samples per rank per step")
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=float, default=None, help="learning rate (default: 0.05 for sgd, 0.001 for adam)")
    p.add_argument("--hidden", default="1536,512", help="hidden layer widths")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--steps", type=int, default=0, help="stop each epoch after this many steps (0: the whole epoch)")
    p.add_argument("--deterministic", action="store_true",
                   help="NDMA reduces in rank order (bitwise reproducible), and torch uses deterministic kernels")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--bucket-mb", type=float, default=4.0, help="DDP bucket size")
    a = p.parse_args()
    if a.lr is None:
        a.lr = 0.05 if a.optimizer == "sgd" else 1e-3
    return a


def launch():
    for r, s in (("NDMA_RANK", "NDMA_SIZE"), ("RANK", "WORLD_SIZE")):
        if r in os.environ and s in os.environ:
            return int(os.environ[r]), int(os.environ[s])
    sys.exit("train.py: no rank in the environment (NDMA_RANK/NDMA_SIZE or RANK/WORLD_SIZE)")


def load(data, split):
    meta = json.load(open(os.path.join(data, "meta.json")))
    n = meta[split]
    x = np.fromfile(os.path.join(data, f"{split}-images.u8"), dtype=np.uint8).reshape(n, meta["rows"] * meta["cols"])
    y = np.fromfile(os.path.join(data, f"{split}-labels.u8"), dtype=np.uint8)
    # Normalized as usual for MNIST (mean 0.1307, std 0.3081).
    x = (torch.from_numpy(x).float() / 255.0 - 0.1307) / 0.3081
    return x, torch.from_numpy(y.astype(np.int64))


def model(widths, seed):
    torch.manual_seed(seed)
    layers, prev = [], 784
    for w in widths:
        layers += [torch.nn.Linear(prev, w), torch.nn.ReLU()]
        prev = w
    layers.append(torch.nn.Linear(prev, 10))
    return torch.nn.Sequential(*layers)


def param_hash(net):
    h = hashlib.sha256()
    for p in net.parameters():
        h.update(p.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def gloo_iface():
    # In a testbed host (a network namespace) the one interface that is
    # not loopback is the host's link: Gloo must use it.
    if "GLOO_SOCKET_IFNAME" not in os.environ:
        try:
            ifs = [i for i in os.listdir("/sys/class/net") if i != "lo"]
            if len(ifs) == 1:
                os.environ["GLOO_SOCKET_IFNAME"] = ifs[0]
        except OSError:
            pass


def main():
    a = parse_args()
    rank, size = launch()
    torch.set_num_threads(a.threads)
    if a.deterministic:
        torch.use_deterministic_algorithms(True)
    gloo_iface()
    # DDP's setup (the initial parameter broadcast) and, for gloo, the
    # gradients go through this process group.
    dist.init_process_group("gloo", init_method="file://" + a.store, rank=rank, world_size=size)

    state, comm = None, None
    if a.backend != "gloo":
        import ndma
        import ndma.torch

        algos = {"allreduce": "ring" if a.backend == "ndma-ring" else "innet"}
        if a.backend == "ndma-offload":
            algos = {"reducescatter": "innet", "allgather": "innet"}
        comm = ndma.Communicator(deterministic=a.deterministic, algorithms=algos)
        assert comm.rank == rank and comm.size == size

    xs, ys = load(a.data, "train")
    xt, yt = load(a.data, "test")
    widths = [int(w) for w in a.hidden.split(",") if w]
    net = model(widths, a.seed)
    nparams = sum(p.numel() for p in net.parameters())
    if a.backend == "ndma-offload":
        ddp = net  # the optimizer averages the gradients itself
        hyper = dict(lr=a.lr, momentum=0.9) if a.optimizer == "sgd" else dict(lr=a.lr)
        opt = ndma.torch.OffloadOptimizer(net.parameters(), comm, algo=a.optimizer, **hyper)
    else:
        ddp = DDP(net, bucket_cap_mb=a.bucket_mb)
        if comm is not None:
            state = ndma.torch.HookState(comm)
            ddp.register_comm_hook(state, ndma.torch.comm_hook)
        if a.optimizer == "sgd":
            opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=0.9)
        else:
            opt = torch.optim.Adam(ddp.parameters(), lr=a.lr)
    lossf = torch.nn.CrossEntropyLoss()

    out = open(a.out, "w") if rank == 0 else None

    def emit(rec):
        if out:
            rec.update(backend=a.backend, ranks=size)
            out.write(json.dumps(rec) + "\n")
            out.flush()

    # Compute alone: forward and backward without the gradient exchange
    # (DDP's no_sync), timed on a few batches before training. Under
    # load (ranks sharing CPUs with each other and with the network
    # work) a step's compute takes longer, so each step also marks when
    # the first layer's gradient is computed, the last one backward
    # computes: the step's compute is the time to that mark, and the
    # rest of the step waits for the gradient exchange (and runs the
    # optimizer).
    grad_ready = [0.0]
    net[0].weight.register_hook(lambda g: grad_ready.__setitem__(0, time.perf_counter()))
    calib = []
    with ddp.no_sync() if ddp is not net else torch.enable_grad():
        for i in range(4):
            x = xs[i * a.batch:(i + 1) * a.batch]
            t0 = time.perf_counter()
            lossf(ddp(x), ys[i * a.batch:(i + 1) * a.batch]).backward()
            calib.append(time.perf_counter() - t0)
    opt.zero_grad()
    compute_s = float(np.median(calib[1:]))

    emit({"kind": "start", "params": nparams, "batch_per_rank": a.batch, "optimizer": a.optimizer, "lr": a.lr, "epochs": a.epochs,
          "hidden": widths, "deterministic": a.deterministic, "compute_alone_s": compute_s,
          "torch": torch.__version__, "threads": a.threads})
    dist.barrier()
    t_start = time.perf_counter()
    timed_from_ns = time.time_ns()
    cpu_train = 0.0  # this process's CPU (every thread) in the training loops
    all_steps = []
    step_global = 0
    steps_per_epoch = len(xs) // (a.batch * size)
    if a.steps:
        steps_per_epoch = min(steps_per_epoch, a.steps)
    train_s = 0.0
    for epoch in range(a.epochs):
        g = torch.Generator().manual_seed(a.seed * 1000 + epoch)
        perm = torch.randperm(len(xs), generator=g)
        mine = perm[rank::size]  # this rank's shard, the same split on every rank
        te0 = time.perf_counter()
        cpu0 = time.process_time()
        step_times, compute_times = [], []
        for s in range(steps_per_epoch):
            idx = mine[s * a.batch:(s + 1) * a.batch]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = lossf(ddp(xs[idx]), ys[idx])
            loss.backward()
            opt.step()
            dt = time.perf_counter() - t0
            step_times.append(dt)
            compute_times.append(grad_ready[0] - t0)
            step_global += 1
            # Rank 0's batch loss (averaging it over the ranks would add a
            # collective per step to what is measured).
            emit({"kind": "step", "epoch": epoch, "step": step_global, "t": time.perf_counter() - t_start,
                  "loss": loss.item(), "step_s": dt, "compute_s": compute_times[-1]})
        epoch_s = time.perf_counter() - te0
        cpu_train += time.process_time() - cpu0
        timed_to_ns = time.time_ns()
        all_steps += step_times
        train_s += epoch_s
        t_epoch = time.perf_counter() - t_start
        # Test accuracy: rank 0 evaluates (every rank holds the same
        # parameters, which the hashes check), the others wait; the time
        # it takes is left out of the training's clock.
        te = time.perf_counter()
        acc = None
        if rank == 0:
            with torch.no_grad():
                acc = (net(xt).argmax(1) == yt).float().mean().item()
        hashes = [None] * size
        dist.all_gather_object(hashes, param_hash(net))
        t_start += time.perf_counter() - te
        st, ct = float(np.median(step_times)), float(np.median(compute_times))
        emit({"kind": "epoch", "epoch": epoch, "t": t_epoch, "test_acc": acc,
              "samples_per_s": steps_per_epoch * a.batch * size / epoch_s, "step_s_median": st,
              "compute_s": ct, "comm_s": max(st - ct, 0.0), "compute_alone_s": compute_s,
              "param_hash": hashes[0], "ranks_agree": len(set(hashes)) == 1})
    # Memory: the optimizer state this rank holds (in the pool instead
    # with ndma-offload) and the process's peak resident set, the largest
    # over the ranks.
    if a.backend == "ndma-offload":
        opt_bytes, pool_bytes = 0, opt.pool_bytes
    else:
        opt_bytes = sum(t.numel() * t.element_size() for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
        pool_bytes = 0
    rss = [None] * size
    dist.all_gather_object(rss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    cpus = [None] * size
    dist.all_gather_object(cpus, cpu_train)
    emit({"kind": "summary", "train_s": train_s, "steps": step_global,
          "samples_per_s": step_global * a.batch * size / train_s,
          "step_s_min": min(all_steps), "step_s_max": max(all_steps),
          "timed_from_ns": timed_from_ns, "timed_to_ns": timed_to_ns, "ranks_cpu_s": sum(cpus),
          "optimizer_state_bytes": opt_bytes, "pool_bytes": pool_bytes, "max_rss_bytes": max(rss)})
    if a.backend == "ndma-offload":
        opt.close()
    if state is not None:
        state.close()
    if comm is not None:
        comm.close()
    dist.barrier()
    if out:
        out.close()
    # Exit without the interpreter's teardown: PyTorch 1.13 can deadlock
    # there when it destroys DDP's reducer (its Gloo process group's
    # destructor waits for a worker thread that waits for the GIL);
    # measured on 2 of 8 ranks once in a few runs. Everything this
    # process wrote is closed above.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
