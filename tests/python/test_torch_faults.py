"""Fault tolerance of the hcomm torch backend (docs/python.md "When a rank
fails"): N ranks (processes started here, init_method file://, a group
timeout of TIMEOUT s).

    test_torch_faults.py die N        a training loop of allreduces; rank
        VICTIM (2) exits (os._exit) in the middle of step DIE_STEP's
        allreduce. Every survivor's allreduce must raise, well under the
        timeout (< TIMEOUT / 4), an exception that names rank VICTIM and
        hcomm's cause; a later operation on the group is refused with the
        first failure; get_error() says so. Then hcomm.torch.shrink_group()
        (the survivors need not know who failed): a group of N-1 ranks
        (renumbered in the old order, the new default group) on which the
        loop goes on: every sum checked exactly, from the step the survivors
        agree to redo, to STEPS.
    test_torch_faults.py die-torch N  the same, through torch's own
        torch.distributed.shrink_group([VICTIM]) (Backend.shrink).
    test_torch_faults.py abort N      every rank waits in a receive nobody
        sends; rank 0 calls abort() on its backend: its receive fails at
        once naming abort(), a later operation is refused; the others'
        receives fail (ERR_REVOKED naming rank 0 and why) well under the
        timeout, where without the revoke they would wait for it. Then
        hcomm.torch.shrink_group() with nobody dead gives a group of all N,
        whose allreduce is checked.
Exit 0: pass, 1: fail, 77: torch or the backend unavailable.
"""
import os
import subprocess
import sys
import tempfile
import time

TIMEOUT = 60  # the group's timeout (s): every failure must be seen well before it
VICTIM, DIE_STEP, STEPS, COUNT = 2, 4, 12, 1 << 16


def log(r, msg):
    print(f"rank {r}: {msg}", flush=True)


def fail(r, msg):
    log(r, "FAIL: " + msg)
    os._exit(1)


def step_values(torch, rank, s):
    return torch.full((COUNT,), float((rank + 1) * (s + 1)), dtype=torch.float64)


def rank_die(mode, r, n, store):
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    from torch._C._distributed_c10d import ErrorType

    import hcomm.torch as ht

    torch.set_num_threads(1)
    dist.init_process_group("hcomm", init_method="file://" + store, rank=r, world_size=n,
                            timeout=timedelta(seconds=TIMEOUT))
    members = list(range(n))  # the old (first) ranks of the current group's members
    me = r
    s, shrunk = 0, False
    while s < STEPS:
        t = step_values(torch, me, s)
        t0 = time.monotonic()
        try:
            if me == VICTIM and s == DIE_STEP:
                w = dist.all_reduce(t, async_op=True)
                time.sleep(0.002)
                os._exit(3)  # dies mid-allreduce: no finalize, the kernel closes its sockets
            dist.all_reduce(t)
        except Exception as e:  # noqa: BLE001
            dt = time.monotonic() - t0
            text = str(e)
            log(r, f"step {s}: after {dt:.2f} s: {type(e).__name__}: {text.splitlines()[0]}")
            if shrunk:
                fail(r, "a failure after the shrink")
            if f"rank {VICTIM}" not in text or "hcomm" not in text:
                fail(r, f"the exception does not name rank {VICTIM}: {text}")
            if dt > TIMEOUT / 4:
                fail(r, f"the exception came after {dt:.1f} s (timeout {TIMEOUT} s)")
            b = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
            if b.get_error() != ErrorType.REMOTE_ERROR:
                fail(r, f"get_error() is {b.get_error()} after a peer failed, want REMOTE_ERROR")
            if f"rank {VICTIM}" not in b.failure:
                fail(r, f"failure does not name rank {VICTIM}: {b.failure!r}")
            try:
                dist.all_reduce(torch.ones(1))
                fail(r, "an operation on the failed group did not raise")
            except RuntimeError as e2:
                if "failed earlier" not in str(e2) or f"rank {VICTIM}" not in str(e2):
                    fail(r, f"the refusal does not say why: {e2}")
            t1 = time.monotonic()
            if mode == "die-torch":
                pg = dist.shrink_group([VICTIM])
            else:
                pg = ht.shrink_group()
            if pg is not dist.distributed_c10d._get_default_group():
                fail(r, "the shrunk group is not the new default group")
            got = [torch.zeros(1, dtype=torch.int64) for _ in range(dist.get_world_size())]
            dist.all_gather(got, torch.tensor([r]))
            members = [int(g) for g in got]
            want = [j for j in range(n) if j != VICTIM]
            if members != want or dist.get_rank() != want.index(r):
                fail(r, f"shrunk to members {members} (rank {dist.get_rank()}), want {want}")
            log(r, f"shrunk to {len(members)} members {members} in {time.monotonic() - t1:.2f} s")
            shrunk = True
            # the step to redo: the lowest any survivor failed (some may have completed it)
            first = torch.tensor([s], dtype=torch.int64)
            dist.all_reduce(first, op=dist.ReduceOp.MIN)
            s = int(first)
            continue
        want = sum(j + 1 for j in members) * (s + 1)
        if not bool((t == want).all()):
            fail(r, f"step {s}: sum {t[:3].tolist()}, want {want} (members {members})")
        s += 1
    if not shrunk:
        fail(r, "finished without seeing the failure")
    dist.barrier()
    log(r, f"finished {STEPS} steps on {len(members)} ranks")
    dist.destroy_process_group()
    os._exit(0)


def rank_abort(r, n, store):
    import torch
    import torch.distributed as dist
    from datetime import timedelta

    import hcomm.torch as ht

    torch.set_num_threads(1)
    dist.init_process_group("hcomm", init_method="file://" + store, rank=r, world_size=n,
                            timeout=timedelta(seconds=TIMEOUT))
    w = dist.irecv(torch.zeros(4), src=(r + 1) % n, tag=7)  # nobody sends it
    dist.barrier()  # every rank's receive is posted
    b = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    t0 = time.monotonic()
    if r == 0:
        b.abort()
    try:
        w.wait()
        fail(r, "the pending receive completed")
    except RuntimeError as e:
        dt = time.monotonic() - t0
        text = str(e)
        log(r, f"after {dt:.2f} s: {text.splitlines()[0]}")
        words = ["abort()"] if r == 0 else ["ERR_REVOKED", "rank 0", "abort()"]
        missing = [wd for wd in words if wd not in text]
        if missing:
            fail(r, f"{missing} not in {text}")
        if dt > (2 if r == 0 else TIMEOUT / 4):
            fail(r, f"the pending receive failed after {dt:.1f} s")
    try:
        dist.all_reduce(torch.ones(1))
        fail(r, "an operation after the abort or revoke did not raise")
    except RuntimeError as e:
        if "failed earlier" not in str(e):
            fail(r, f"the refusal does not say why: {e}")
    pg = ht.shrink_group()  # nobody died: a group of all n
    if dist.get_world_size() != n or dist.get_rank() != r or pg.size() != n:
        fail(r, f"shrunk without a death to {dist.get_world_size()} ranks, rank {dist.get_rank()}")
    t = torch.full((5,), float(r + 1))
    dist.all_reduce(t)
    if not bool((t == n * (n + 1) / 2).all()):
        fail(r, f"allreduce on the new group: {t.tolist()}")
    dist.barrier()
    log(r, "abort, revoke and shrink passed")
    dist.destroy_process_group()
    os._exit(0)


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--rank":
        mode, r, n, store = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
        return rank_abort(r, n, store) if mode == "abort" else rank_die(mode, r, n, store)
    mode, n = sys.argv[1], int(sys.argv[2])
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    env = {k: v for k, v in os.environ.items() if k != "HCOMM_TIMEOUT"}
    env.update(OMP_NUM_THREADS="1", HCOMM_TIMEOUT=str(TIMEOUT))
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        me = os.path.abspath(__file__)
        procs = [subprocess.Popen([sys.executable, me, "--rank", mode, str(r), str(n), store], env=env)
                 for r in range(n)]
        rcs = []
        for p in procs:
            try:
                rcs.append(p.wait(timeout=TIMEOUT + 60))
            except subprocess.TimeoutExpired:
                p.kill()
                rcs.append("hung")
    want = [3 if (mode != "abort" and r == VICTIM) else 0 for r in range(n)]
    print(f"{mode}, {n} ranks: exit codes {rcs}, want {want}")
    return 0 if rcs == want else 1


if __name__ == "__main__":
    sys.exit(main())
