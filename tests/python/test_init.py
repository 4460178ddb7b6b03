"""hcomm.init from a rendezvous of the program's own (hcomm_init_rank), no
launcher: this script starts NRANKS processes itself.

    test_init.py NRANKS

Each process joins three jobs in turn, finalizing in between:
  1. init(store, rank, size) through a file store written here (set/get);
  2. init(rank=, size=, bootstrap=url, key=k) with an address and key that
     the parent made with hcomm.bootstrap_address() and handed out;
  3. init(store, ...) through torch.distributed.FileStore, when torch is there;
and a job of one rank. Exit 0: pass, 1: a check failed, 77: numpy missing.
"""
import multiprocessing as mp
import os
import sys
import tempfile
import time
import traceback

from hcomm_testlib import hcomm, np


class DirStore:
    """The least a store needs: set(key, value) and get(key) that waits."""

    def __init__(self, path):
        self.path = path

    def _file(self, key):
        return os.path.join(self.path, key.replace("/", "_"))

    def set(self, key, value):
        tmp = self._file(key) + f".tmp{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(value)
        os.rename(tmp, self._file(key))

    def get(self, key, timeout=60):
        deadline = time.time() + timeout
        while not os.path.exists(self._file(key)):
            if time.time() > deadline:
                raise TimeoutError(key)
            time.sleep(0.01)
        with open(self._file(key), "rb") as f:
            return f.read()


def job(name, w, rank, size, fails):
    if (w.rank, w.size) != (rank, size):
        fails.append(f"{name}: world is rank {w.rank} of {w.size}")
    x = np.full(100, rank + 1, dtype=np.int64)
    w.allreduce(x)
    if not np.array_equal(x, np.full(100, size * (size + 1) // 2)):
        fails.append(f"{name}: allreduce gave {x[:3]}")
    sub = w.split(rank % 2)
    y = np.ones(3)
    sub.allreduce(y)
    if y[0] != sub.size:
        fails.append(f"{name}: split allreduce gave {y[0]}")
    sub.free()
    w.barrier()
    hcomm.finalize()
    if hcomm.initialized():
        fails.append(f"{name}: still initialized after finalize")


def child(rank, size, tmp, url, key, q):
    fails = []
    try:
        w = hcomm.init(DirStore(tmp), rank, size, prefix="job1")
        job("file store", w, rank, size, fails)
        w = hcomm.init(rank=rank, size=size, bootstrap=url, key=key)
        job("bootstrap address", w, rank, size, fails)
        try:
            import torch.distributed as dist
        except ImportError:
            dist = None
        if dist is not None:
            store = dist.FileStore(os.path.join(tmp, "torchstore"), size)
            w = hcomm.init(store, rank, size)
            job("torch FileStore", w, rank, size, fails)
    except Exception:  # noqa: BLE001
        fails.append(traceback.format_exc())
    q.put((rank, fails))


def single():
    fails = []
    with tempfile.TemporaryDirectory() as tmp:
        w = hcomm.init(DirStore(tmp), 0, 1)
        job("one rank", w, 0, 1, fails)
    return fails


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    url, key = hcomm.bootstrap_address()
    if not url.startswith("tcp://") or len(key) != 32:
        print(f"FAIL: bootstrap_address gave {url!r} {key!r}")
        return 1
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        procs = [ctx.Process(target=child, args=(r, n, tmp, url, key, q)) for r in range(n)]
        for p in procs:
            p.start()
        results = {}
        try:
            for _ in range(n):
                r, f = q.get(timeout=120)
                results[r] = f
        except Exception as e:  # noqa: BLE001
            print(f"FAIL: a rank did not report: {e!r}")
            for p in procs:
                p.kill()
            return 1
        for p in procs:
            p.join(30)
    fails = [f"rank {r}: {f}" for r, fs in sorted(results.items()) for f in fs]
    fails += [f"single: {f}" for f in single()]
    for f in fails:
        print("FAIL:", f)
    print(f"{n} ranks: file store, bootstrap address, torch store, one rank: "
          f"{'PASS' if not fails else f'{len(fails)} failed'}")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
