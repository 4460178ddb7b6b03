"""Jobs of the hcomm backend under a launcher, with no HCOMM_* variable set.

    torchrun_job.py torchrun NPROC     runs NPROC ranks under
        python -m torch.distributed.run --standalone --max-restarts 0
        (elastic restarts off); each rank: init_process_group("hcomm")
        through env://, collectives and 5 DDP steps against gloo
    torchrun_job.py --rank slurm       one Slurm task (srun, a task per
        rank, tests/launchers/slurm_test.sh --torch): Slurm's variables
        mapped to env:// as docs/python.md shows, then the torchrun rank's
        checks
    torchrun_job.py die NPROC          plain env:// (RANK, WORLD_SIZE,
        MASTER_ADDR, MASTER_PORT set here): rank 1 exits after the first
        allreduce; every other rank's next collective must raise an
        exception naming rank 1, well within the group's timeout
Exit 0: pass, 1: fail, 77: torch or the backend unavailable.
"""
import os
import socket
import subprocess
import sys
import time

TIMEOUT = 60  # the group's timeout in the die test (s)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("HCOMM_")}
    env["OMP_NUM_THREADS"] = "1"
    return env


def rank_torchrun():
    """One rank under torchrun: env:// only."""
    import torch
    import torch.distributed as dist
    import torch.nn as nn

    import hcomm.torch  # noqa: F401  (an installed hcomm is found through torch's entry points too)

    torch.set_num_threads(1)
    assert not [k for k in os.environ if k.startswith("HCOMM_")], "an HCOMM_ variable is set"
    dist.init_process_group("hcomm")  # env://: torchrun's RANK, WORLD_SIZE, MASTER_*
    r, n = dist.get_rank(), dist.get_world_size()
    t = torch.full((1000,), float(r + 1))
    dist.all_reduce(t)
    assert bool((t == n * (n + 1) / 2).all()), t[:4]
    out = [torch.zeros(3) for _ in range(n)]
    dist.all_gather(out, torch.full((3,), float(r)))
    assert all(bool((o == j).all()) for j, o in enumerate(out)), out
    gloo = dist.new_group(backend="gloo")
    params = {}
    for name, g in (("hcomm", None), ("gloo", gloo)):
        torch.manual_seed(7)
        model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 2))
        ddp = nn.parallel.DistributedDataParallel(model, process_group=g)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
        for step in range(5):
            gen = torch.Generator().manual_seed(100 * step + r)
            opt.zero_grad()
            nn.functional.mse_loss(ddp(torch.randn(4, 8, generator=gen)), torch.randn(4, 2, generator=gen)).backward()
            opt.step()
        params[name] = [p.detach() for p in model.parameters()]
    if n == 2:  # bit-identical at 2 ranks (a+b in either order)
        assert all(torch.equal(a, b) for a, b in zip(params["hcomm"], params["gloo"])), "DDP differs from gloo"
    else:
        assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(params["hcomm"], params["gloo"]))
    dist.destroy_process_group()
    print(f"rank {r} of {n}: torchrun job passed", flush=True)


def rank_slurm():
    """A Slurm task: RANK, WORLD_SIZE, LOCAL_RANK and MASTER_ADDR from srun's
    variables (the first node of the job; a port from the job id), nothing
    else set by hand, then what a torchrun rank checks."""
    jid = int(os.environ["SLURM_JOB_ID"])
    nodes = subprocess.run(["scontrol", "show", "hostnames", os.environ["SLURM_JOB_NODELIST"]],
                           capture_output=True, text=True, check=True).stdout.split()
    os.environ.update(RANK=os.environ["SLURM_PROCID"], WORLD_SIZE=os.environ["SLURM_NTASKS"],
                      LOCAL_RANK=os.environ["SLURM_LOCALID"], MASTER_ADDR=nodes[0],
                      MASTER_PORT=str(20000 + (jid * 64 + 17) % 40000))
    rank_torchrun()


def rank_die():
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    import hcomm.torch  # noqa: F401

    torch.set_num_threads(1)
    dist.init_process_group("hcomm", timeout=timedelta(seconds=TIMEOUT))
    r = dist.get_rank()
    t = torch.ones(10)
    dist.all_reduce(t)
    if r == 1:
        os._exit(3)  # dies: no finalize, its sockets closed by the kernel
    t0 = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(torch.ones(1 << 16))
            time.sleep(0.01)
        print(f"rank {r}: FAIL: no exception after rank 1 died", flush=True)
        linger(dist, r)
        os._exit(1)
    except Exception as e:  # noqa: BLE001
        dt = time.monotonic() - t0
        msg = str(e).split("\n")[0]
        print(f"rank {r}: after {dt:.1f} s: {type(e).__name__}: {msg}", flush=True)
        named = "rank 1" in str(e) or "peer 1" in str(e)
        if not named or dt > TIMEOUT:
            print(f"rank {r}: FAIL: the exception {'does not name rank 1' if not named else 'came too late'}",
                  flush=True)
            linger(dist, r)
            os._exit(1)
    linger(dist, r)
    os._exit(0)  # the group cannot be destroyed cleanly with a dead member


def linger(dist, r):
    """Rank 0 hosts the store (plain env://): it stays until every other
    survivor has its exception. The backend reads the revoking rank's cause
    there (best effort, docs/python.md); a host that exits first leaves the
    others hcomm's words alone, which name the rank that revoked (seen: rank
    2 failed this test when rank 0 exited 0.1 s after its own exception)."""
    try:
        store = dist.distributed_c10d._get_default_store()
        survivors = dist.get_world_size() - 1
        n = store.add("die_test/done", 1)
        end = time.monotonic() + 30
        while r == 0 and n < survivors and time.monotonic() < end:
            time.sleep(0.05)
            n = store.add("die_test/done", 0)
    except Exception as e:  # noqa: BLE001
        print(f"rank {r}: the store: {e}", flush=True)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--rank":
        return {"torchrun": rank_torchrun, "slurm": rank_slurm}.get(sys.argv[2], rank_die)()
    mode, n = sys.argv[1], int(sys.argv[2])
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    env = clean_env()
    me = os.path.abspath(__file__)
    if mode == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
               "--max-restarts=0", me, "--rank", "torchrun"]
        p = subprocess.run(cmd, env=env, timeout=240)
        print(f"torchrun {n} processes: rc {p.returncode}")
        return 0 if p.returncode == 0 else 1
    port = free_port()
    procs = []
    for r in range(n):
        e = dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r), MASTER_ADDR="127.0.0.1",
                 MASTER_PORT=str(port))
        procs.append(subprocess.Popen([sys.executable, me, "--rank", "die"], env=e))
    rcs = [p.wait(timeout=TIMEOUT + 60) for p in procs]
    print(f"die test, {n} ranks: exit codes {rcs} (rank 1 died with 3)")
    return 0 if rcs[1] == 3 and all(rc == 0 for j, rc in enumerate(rcs) if j != 1) else 1


if __name__ == "__main__":
    sys.exit(main())
