"""Tests of the ndma Python package. They need a switch: the Go test
TestPython (libndma) starts one (unsealed) and runs them with
NDMA_TEST_SWITCH, NDMA_TEST_TOKEN and NDMA_INSECURE=1 set, NDMA_LIB
naming the library it built, and NDMA_HIERARCHY=off: the ranks, all on
this host, go over the network, except in the tests that set
NDMA_HIERARCHY=auto."""

import itertools
import os
import subprocess
import sys
import time

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import ndma  # noqa: E402

SWITCH = os.environ.get("NDMA_TEST_SWITCH")
TOKEN = os.environ.get("NDMA_TEST_TOKEN")
INSECURE = os.environ.get("NDMA_INSECURE") == "1"  # the test switch does not seal
pytestmark = pytest.mark.skipif(not SWITCH, reason="no switch: run through the Go test TestPython (libndma)")

_jobs = itertools.count()
HERE = os.path.dirname(os.path.abspath(__file__))


def job():
    return f"py-{os.getpid()}-{next(_jobs)}"


def run_ranks(scenario, size, timeout=120, env=None):
    """Runs ranks.py SCENARIO as size processes; returns their outputs."""
    j = job()
    procs = []
    for r in range(size):
        e = dict(os.environ, NDMA_RANK=str(r), NDMA_SIZE=str(size), NDMA_SWITCH=SWITCH, NDMA_TOKEN=TOKEN, NDMA_JOB=j,
                 NDMA_TEST_STACKS_AFTER=str(timeout - 20))
        e.update(env or {})
        procs.append(subprocess.Popen([sys.executable, os.path.join(HERE, "ranks.py"), scenario], env=e,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = []
    for p in procs:
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            rest = [q.communicate()[0] for q in procs]
            pytest.fail(f"{scenario}: ranks still running after {timeout}s:\n" + "\n".join(
                f"--- rank {r}:\n{o}" for r, o in enumerate(rest)))
        outs.append((p.returncode, out))
    return outs


def solo(**kw):
    """A communicator of one rank (enough for argument checks)."""
    return ndma.Communicator(0, 1, SWITCH, token=TOKEN, job=job(), insecure=INSECURE, **kw)


def test_collectives_numpy():
    for r, (rc, out) in enumerate(run_ranks("numpy", 4)):
        assert rc == 0 and out.endswith("ok\n"), f"rank {r}: {out}"


def test_collectives_torch():
    pytest.importorskip("torch")
    for r, (rc, out) in enumerate(run_ranks("torch", 3)):
        assert rc == 0 and out.endswith("ok\n"), f"rank {r}: {out}"


def test_ddp_comm_hook(tmp_path):
    pytest.importorskip("torch")
    outs = run_ranks("ddp", 2, env={"NDMA_TEST_STORE": str(tmp_path / "store")})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and out.endswith("ok\n"), f"rank {r}: {out}"


def test_hierarchy(tmp_path):
    # 4 ranks of this host through shared memory (NDMA_HIERARCHY=auto):
    # every collective checked, then communicators from keyword arguments.
    env = {"NDMA_HIERARCHY": "auto", "NDMA_TEST_LOCAL_SIZE": "4"}
    for scenario in ("numpy", "hierarchy"):
        outs = run_ranks(scenario, 4, env=env)
        assert all(rc == 0 and out.endswith("ok\n") for rc, out in outs), scenario + ":\n" + "\n".join(
            f"--- rank {r}, exit {rc}:\n{out}" for r, (rc, out) in enumerate(outs))


def test_ddp_hierarchy(tmp_path):
    # DDP with 2 ranks of one host sharing memory: the NDMA hook against
    # Gloo, bitwise, and the ndma backend.
    pytest.importorskip("torch")
    for scenario in ("ddp", "backend"):
        outs = run_ranks(scenario, 2, env={"NDMA_TEST_STORE": str(tmp_path / scenario), "NDMA_HIERARCHY": "auto",
                                           "NDMA_TEST_LOCAL_SIZE": "2"})
        assert all(rc == 0 and out.endswith("ok\n") for rc, out in outs), scenario + ":\n" + "\n".join(
            f"--- rank {r}, exit {rc}:\n{out}" for r, (rc, out) in enumerate(outs))


def test_torch_distributed_backend(tmp_path):
    pytest.importorskip("torch")
    for size in (2, 3):
        outs = run_ranks("backend", size, env={"NDMA_TEST_STORE": str(tmp_path / f"store{size}")})
        assert all(rc == 0 and out.endswith("ok\n") for rc, out in outs), f"{size} ranks:\n" + "\n".join(
            f"--- rank {r}, exit {rc}:\n{out}" for r, (rc, out) in enumerate(outs))


def test_deterministic_training(tmp_path):
    pytest.importorskip("torch")
    outs = run_ranks("deterministic", 3, env={"NDMA_TEST_STORE": str(tmp_path / "store"), "NDMA_DETERMINISTIC": "1",
                                              "NDMA_ALGO_ALLREDUCE": "innet"})
    assert all(rc == 0 and out.endswith("ok\n") for rc, out in outs), "\n".join(
        f"--- rank {r}, exit {rc}:\n{out}" for r, (rc, out) in enumerate(outs))


def test_dead_rank_raises():
    outs = run_ranks("dead", 2, env={"NDMA_TIMEOUT": "10s"})
    rc, out = outs[0]
    assert rc == 0 and out.endswith("ok\n"), out
    assert "raised" in out


def test_dead_rank_raises_in_torch(tmp_path):
    pytest.importorskip("torch")
    outs = run_ranks("dead_torch", 2, env={"NDMA_TIMEOUT": "10s", "NDMA_TEST_STORE": str(tmp_path / "store")})
    rc, out = outs[0]
    assert rc == 0 and out.endswith("ok\n"), out
    assert "hook raised" in out and "backend raised RankError" in out and "backend DDP raised" in out, out


def test_mismatched_sizes_raise_everywhere():
    outs = run_ranks("mismatch", 3, env={"NDMA_TIMEOUT": "60s"})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and out.endswith("ok\n") and "raised InvalidArgument" in out, f"rank {r}: {out}"


def test_mismatched_sizes_raise_in_shared_memory():
    outs = run_ranks("mismatch_hier", 3, env={"NDMA_TIMEOUT": "60s", "NDMA_HIERARCHY": "auto", "NDMA_TEST_LOCAL_SIZE": "3"})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and out.endswith("ok\n") and "raised InvalidArgument" in out, f"rank {r}: {out}"


def test_mismatched_sizes_ring_raise_everywhere():
    outs = run_ranks("mismatch_ring", 4, env={"NDMA_TIMEOUT": "60s"})
    for r, (rc, out) in enumerate(outs):
        assert rc == 0 and out.endswith("ok\n") and "raised InvalidArgument" in out, f"rank {r}: {out}"


def test_bad_buffers():
    with solo() as c:
        a = np.zeros((4, 4), np.float32)
        with pytest.raises(ndma.InvalidArgument, match="not contiguous"):
            c.allreduce(a[:, 1])
        with pytest.raises(ndma.InvalidArgument, match="dtype int16"):
            c.allreduce(np.zeros(4, np.int16))
        with pytest.raises(ndma.InvalidArgument, match="numpy array or a CPU torch tensor"):
            c.allreduce([1.0, 2.0])
        with pytest.raises(ndma.InvalidArgument, match="reduction"):
            c.allreduce(np.zeros(4, np.float32), op="mean")
        with pytest.raises(ndma.InvalidArgument, match="root"):
            c.bcast(np.zeros(4, np.float32), root=1)
        with pytest.raises(ndma.InvalidArgument, match="output of 3"):
            c.allreduce(np.zeros(4, np.float32), out=np.zeros(3, np.float32))
        with pytest.raises(ndma.InvalidArgument, match="read-only"):
            ro = np.zeros(4, np.float32)
            ro.flags.writeable = False
            c.allreduce(ro)
        # Still usable after every refusal.
        x = np.full(8, 3, np.int64)
        c.allreduce(x)
        assert np.array_equal(x, np.full(8, 3, np.int64))


def test_bad_tensors():
    torch = pytest.importorskip("torch")
    with solo() as c:
        with pytest.raises(ndma.InvalidArgument, match="on meta"):
            c.allreduce(torch.empty(4, device="meta"))
        with pytest.raises(ndma.InvalidArgument, match="not contiguous"):
            c.allreduce(torch.zeros(4, 4).t())
        with pytest.raises(ndma.InvalidArgument, match="dtype torch.float16"):
            c.allreduce(torch.zeros(4, dtype=torch.float16))


def test_settings():
    with solo(timeout=30, deterministic=True, algorithms={"allreduce": "ring", "bcast": "chain"}) as c:
        c.set_algo("allreduce", "auto")
        c.set_algo("allgather", None)
        with pytest.raises(ndma.InvalidArgument, match="bcast has no ring algorithm"):
            c.set_algo("bcast", "ring")
        with pytest.raises(ndma.InvalidArgument, match="operation"):
            c.set_algo("sort", "ring")
    with pytest.raises(ndma.InvalidArgument, match="unknown algorithm"):
        solo(algorithms={"allreduce": "fastest"})
    with pytest.raises(ndma.InvalidArgument, match="hierarchy='sometimes'"):
        solo(hierarchy="sometimes")
    with solo(hierarchy="auto", host_id="h") as c:
        assert c.local_size == 1  # alone on its host


def test_closed():
    c = solo()
    assert not c.closed
    c.close()
    c.close()  # twice is fine
    with pytest.raises(ndma.Closed):
        c.allreduce(np.zeros(4, np.float32))
    with pytest.raises(ndma.Closed):
        c.barrier()


def test_launch_errors():
    with pytest.raises(ndma.InvalidArgument, match="rank, size and switch together"):
        ndma.Communicator(rank=0)
    with pytest.raises(ndma.InvalidArgument, match="rank 3 of size 2"):
        ndma.Communicator(3, 2, SWITCH, token=TOKEN)
    with pytest.raises(ndma.AuthError):
        ndma.Communicator(0, 1, SWITCH, token="wrong token", job=job(), insecure=INSECURE, join_timeout=5)
    with pytest.raises(ndma.NoSwitch, match="no switch answers"):
        ndma.Communicator(0, 1, "127.0.0.1:9", token=TOKEN, job=job(), insecure=INSECURE, join_timeout=1)
    with pytest.raises(ndma.InvalidArgument, match="insecure=True in Python"):
        ndma.Communicator(0, 1, SWITCH, token=TOKEN, job=job())  # neither a credential nor insecure
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NDMA_RANK", "NDMA_SIZE", "OMPI_", "PMI_", "SLURM_"))}
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    out = subprocess.run([sys.executable, "-c", "import ndma\ntry:\n ndma.Communicator()\nexcept ndma.LaunchError as e: print('LaunchError', e)"],
                         env=dict(env, PYTHONPATH=os.path.join(HERE, "..")), capture_output=True, text=True, timeout=60)
    assert "LaunchError" in out.stdout and "no rank in the environment" in out.stdout, out


def test_request_keeps_buffers():
    with solo() as c:
        req = c.iallreduce(np.full(1000, 2.0, np.float64))
        out = req.wait()  # the array lived on through the request
        assert np.array_equal(out, np.full(1000, 2.0))
        assert req.test() and req.wait() is out  # completed: idempotent


def test_request_on_done():
    import threading

    with solo() as c:
        done = threading.Event()
        seen = []

        def note():
            seen.append((threading.get_ident(), req.wait()))
            done.set()

        req = c.iallreduce(np.full(50001, 3.0, np.float32), out=np.zeros(50001, np.float32))
        req.on_done(note)
        assert done.wait(30), "no notification"
        (thread, out), = seen
        assert thread != threading.get_ident(), "the notification ran on the caller's thread"
        assert np.array_equal(out, np.full(50001, 3.0, np.float32)) and req.done
        with pytest.raises(ndma.InvalidArgument, match="no request"):
            req.on_done(note)  # completed and freed by its wait
        # A request notified twice, and one completed before on_done.
        req = c.ibarrier()
        req.on_done(lambda: None)
        with pytest.raises(ndma.InvalidArgument, match="already has a notification"):
            req.on_done(lambda: None)
        req.wait()
        req, late = c.ibarrier(), threading.Event()
        time.sleep(0.05)
        req.on_done(lambda: (req.wait(), late.set()))
        assert late.wait(30), "no notification of a request completed before on_done"


def test_region():
    for r, (rc, out) in enumerate(run_ranks("region", 3)):
        assert rc == 0 and out.endswith("ok\n"), f"rank {r}: {out}"


def test_offload_optimizer():
    pytest.importorskip("torch")
    for r, (rc, out) in enumerate(run_ranks("offload", 3)):
        assert rc == 0 and out.endswith("ok\n"), f"rank {r}: {out}"
