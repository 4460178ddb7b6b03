"""The hcomm module's collectives on numpy arrays and torch CPU tensors,
checked element-wise on every rank. Run under hcommrun:

    hcommrun -n 4 /usr/bin/python3 test_module.py [--no-torch] [--store-dir DIR]

Every collective and send/recv, blocking and non-blocking, in place and out
of place, every dtype (numpy has no bfloat16: uint16 arrays read as
hcomm.BFLOAT16 through dtype=) and every op for allreduce; buffers that the
Request alone keeps alive; split; the torch backend in the same process as
the module (the world hcomm.init() made is reused) when --store-dir is given.
Exit 0: pass, 1: a check failed, 77: numpy missing.
"""
import argparse
import gc
import os
import sys

from hcomm_testlib import hcomm, np

ap = argparse.ArgumentParser()
ap.add_argument("--no-torch", action="store_true")
ap.add_argument("--store-dir", help="also run the torch backend on the module's world")
args = ap.parse_args()

torch = None
if not args.no_torch:
    try:
        import torch
        torch.set_num_threads(1)
    except ImportError:
        torch = None

w = hcomm.init()
R, N = w.rank, w.size
failures = []
checks = 0


def check(name, got, want):
    global checks
    checks += 1
    got = np.asarray(got, dtype=np.float64).ravel()
    want = np.asarray(want, dtype=np.float64).ravel()
    if got.shape != want.shape or not np.array_equal(got, want):
        bad = np.nonzero(got != want)[0] if got.shape == want.shape else []
        where = f" first at [{bad[0]}]: {got[bad[0]]} != {want[bad[0]]}" if len(bad) else \
            f" shapes {got.shape} {want.shape}"
        failures.append(f"rank {R}: {name}:{where}")


def bf16_bits(v):
    return (np.asarray(v, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)


def bf16_values(bits):
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


class Numpy:
    name = "numpy"
    dtypes = ["int8", "uint8", "int32", "uint32", "int64", "uint64", "float16", "bfloat16",
              "float32", "float64"]

    def make(self, values, dt):
        """(array, extra keywords) holding exact values of dtype dt."""
        if dt == "bfloat16":
            return bf16_bits(values), {"dtype": hcomm.BFLOAT16}
        return np.asarray(values).astype(dt), {}

    def empty(self, m, dt):
        if dt == "bfloat16":
            return np.full(m, 0xFFFF, dtype=np.uint16)
        return np.full(m, 99, dtype=dt) if dt != "int16" else np.full(m, -7, dtype=np.int16)

    def values(self, a, dt):
        return bf16_values(a) if dt == "bfloat16" else np.asarray(a)

    def part(self, a, lo, hi):
        return a[lo:hi]


class Torch:
    name = "torch"
    dtypes = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

    def make(self, values, dt):
        return torch.tensor(np.asarray(values, dtype=np.float64)).to(getattr(torch, dt)), {}

    def empty(self, m, dt):
        return torch.full((m,), 99 if dt != "int16" else -7, dtype=getattr(torch, dt))

    def values(self, a, dt):
        return a.double().numpy()

    def part(self, a, lo, hi):
        return a[lo:hi]


def vals(rank, m, op=hcomm.SUM):
    """Exact in every dtype, sums and products too, at up to 4 ranks."""
    i = np.arange(m)
    if op == hcomm.PROD:
        return 1 + (i + rank) % 2
    return (i % 5) + rank + 1


def reduced(m, op, dt):
    per = np.stack([vals(j, m, op).astype(np.float64) for j in range(N)])
    if op == hcomm.SUM:
        return per.sum(0)
    if op == hcomm.PROD:
        return per.prod(0)
    if op == hcomm.MAX:
        return per.max(0)
    if op == hcomm.MIN:
        return per.min(0)
    s = per.sum(0)
    return s // N if "int" in dt else s / N


OPS = {"sum": hcomm.SUM, "prod": hcomm.PROD, "max": hcomm.MAX, "min": hcomm.MIN, "avg": hcomm.AVG}


def test_allreduce(k):
    for dt in k.dtypes:
        for on, op in OPS.items():
            for mode in range(4):  # in place / out of place x blocking / non-blocking
                m = 37 + mode
                x, kw = k.make(vals(R, m, op), dt)
                nb = mode & 1
                if mode & 2:
                    out = k.empty(m, dt)
                    res = (w.iallreduce(x, out, op, **kw).wait() if nb else
                           w.allreduce(x, out, op, **kw))
                    check(f"{k.name} allreduce {dt} {on} out-of-place", k.values(x, dt), vals(R, m, op))
                else:
                    res = w.iallreduce(x, op=op, **kw).wait() if nb else w.allreduce(x, op=op, **kw)
                check(f"{k.name} allreduce {dt} {on} mode {mode}", k.values(res, dt), reduced(m, op, dt))


def test_rooted(k):
    for dt in ("float32", "int64", "bfloat16", "float16"):
        root = N - 1
        m = 19
        # broadcast
        b, kw = k.make(vals(R, m), dt)
        w.broadcast(b, root=root, **kw)
        check(f"{k.name} broadcast {dt}", k.values(b, dt), vals(root, m))
        b, kw = k.make(vals(R, m), dt)
        w.ibroadcast(b, root=0, **kw).wait()
        check(f"{k.name} ibroadcast {dt}", k.values(b, dt), vals(0, m))
        # reduce, in place and out of place, every op
        for on, op in OPS.items():
            x, kw = k.make(vals(R, m, op), dt)
            w.reduce(x, op=op, root=1 % N, **kw)
            if R == 1 % N:
                check(f"{k.name} reduce {dt} {on} in place", k.values(x, dt), reduced(m, op, dt))
            x, kw = k.make(vals(R, m, op), dt)
            out = k.empty(m, dt)
            res = w.ireduce(x, out if R == 0 else None, op, 0, **kw).wait()
            if R == 0:
                check(f"{k.name} ireduce {dt} {on}", k.values(res, dt), reduced(m, op, dt))
            else:
                check(f"{k.name} ireduce {dt} {on} non-root result", [res is None], [True])
        # gather: out of place, in place at the root
        x, kw = k.make(vals(R, m), dt)
        g = k.empty(m * N, dt)
        res = w.gather(x, g if R == 0 else None, root=0, **kw)
        want = np.concatenate([vals(j, m) for j in range(N)])
        if R == 0:
            check(f"{k.name} gather {dt}", k.values(res, dt), want)
        g, kw = k.make(np.concatenate([vals(j, m) if j == root else np.zeros(m) for j in range(N)]), dt)
        res = w.igather(None if R == root else k.make(vals(R, m), dt)[0],
                        g if R == root else None, root=root, **kw).wait()
        if R == root:
            check(f"{k.name} igather in place {dt}", k.values(res, dt), want)
        # scatter: out of place, in place at the root
        s, kw = k.make(np.concatenate([vals(j, m) * 2 for j in range(N)]), dt)
        out = k.empty(m, dt)
        res = w.scatter(s if R == 0 else None, out, root=0, **kw)
        check(f"{k.name} scatter {dt}", k.values(res, dt), vals(R, m) * 2)
        if R == root:
            res = w.iscatter(s, None, root=root, **kw).wait()
            check(f"{k.name} iscatter in place {dt}", k.values(res, dt)[root * m:(root + 1) * m],
                  vals(root, m) * 2)
        else:
            out = k.empty(m, dt)
            res = w.iscatter(None, out, root=root, **kw).wait()
            check(f"{k.name} iscatter {dt}", k.values(res, dt), vals(R, m) * 2)


def test_gathers(k):
    for dt in ("float32", "int32", "bfloat16", "uint8"):
        m = 13
        want = np.concatenate([vals(j, m) for j in range(N)])
        x, kw = k.make(vals(R, m), dt)
        out = k.empty(m * N, dt)
        check(f"{k.name} allgather {dt}", k.values(w.allgather(x, out, **kw), dt), want)
        inp, kw = k.make(np.concatenate([vals(j, m) if j == R else np.zeros(m) for j in range(N)]), dt)
        check(f"{k.name} iallgather in place {dt}",
              k.values(w.iallgather(None, inp, **kw).wait(), dt), want)
        # reduce_scatter: out of place and in place
        full = np.concatenate([vals(R, m) * (j + 1) for j in range(N)])
        want_rs = sum(vals(j, m) for j in range(N)) * (R + 1)
        x, kw = k.make(full, dt)
        out = k.empty(m, dt)
        check(f"{k.name} reduce_scatter {dt}", k.values(w.reduce_scatter(x, out, **kw), dt), want_rs)
        x, kw = k.make(full, dt)
        res = w.ireduce_scatter(x, op=hcomm.SUM, **kw).wait()
        check(f"{k.name} ireduce_scatter in place {dt}", k.values(res, dt)[R * m:(R + 1) * m], want_rs)
        # alltoall: block j of rank r holds 100 r + j
        blocks = np.concatenate([np.full(m, 10 * R + j) for j in range(N)])
        want_a2a = np.concatenate([np.full(m, 10 * j + R) for j in range(N)])
        x, kw = k.make(blocks, dt)
        out = k.empty(m * N, dt)
        check(f"{k.name} alltoall {dt}", k.values(w.alltoall(x, out, **kw), dt), want_a2a)
        x, kw = k.make(blocks, dt)
        check(f"{k.name} ialltoall in place {dt}", k.values(w.ialltoall(x, **kw).wait(), dt), want_a2a)


def test_vector(k):
    for dt in ("float64", "int64", "float16", "int8"):
        # allgatherv: rank j gives j elements (rank 0 none), gaps of 2 between blocks
        counts = [j for j in range(N)]
        displs = [sum(counts[:j]) + 2 * j for j in range(N)]
        total = displs[-1] + counts[-1]
        want = k.values(k.empty(total, dt), dt).copy()
        for j in range(N):
            want[displs[j]:displs[j] + counts[j]] = vals(j, counts[j])
        x, kw = k.make(vals(R, counts[R]), dt)
        out = k.empty(total, dt)
        check(f"{k.name} allgatherv {dt}", k.values(w.allgatherv(x, out, counts, displs, **kw), dt), want)
        out = k.empty(total, dt)
        out_vals = k.values(out, dt).copy()
        out_vals[displs[R]:displs[R] + counts[R]] = vals(R, counts[R])
        out, kw = k.make(out_vals, dt)
        check(f"{k.name} iallgatherv in place {dt}",
              k.values(w.iallgatherv(None, out, counts, displs, **kw).wait(), dt), want)
        # default displs: packed
        out = k.empty(sum(counts), dt)
        check(f"{k.name} allgatherv packed {dt}",
              k.values(w.allgatherv(x, out, counts, **kw), dt),
              np.concatenate([vals(j, counts[j]) for j in range(N)]))
        # reduce_scatterv: rank j gets (j + 1) % 3 elements (some get none)
        rc = [(j + 1) % 3 for j in range(N)]
        full = np.concatenate([vals(R, rc[j]) + j for j in range(N)])
        x, kw = k.make(full, dt)
        out = k.empty(rc[R], dt)
        want = sum(vals(j, rc[R]) + R for j in range(N))
        check(f"{k.name} reduce_scatterv {dt}", k.values(w.reduce_scatterv(x, out, rc, **kw), dt), want)
        x, kw = k.make(full, dt)
        out = k.empty(rc[R], dt)
        check(f"{k.name} ireduce_scatterv max {dt}",
              k.values(w.ireduce_scatterv(x, out, rc, hcomm.MAX, **kw).wait(), dt),
              np.max([vals(j, rc[R]) + R for j in range(N)], axis=0) if rc[R] else [])
        # alltoallv: rank r sends (r + j) % 3 elements of value 10 r + j to rank j
        sc = [(R + j) % 3 for j in range(N)]
        rcv = [(j + R) % 3 for j in range(N)]
        send = np.concatenate([np.full(sc[j], 10 * R + j) for j in range(N)])
        want = np.concatenate([np.full(rcv[j], 10 * j + R) for j in range(N)])
        x, kw = k.make(send, dt)
        out = k.empty(sum(rcv), dt)
        check(f"{k.name} alltoallv {dt}", k.values(w.alltoallv(x, sc, out, rcv, **kw), dt), want)
        # with displacements: receive blocks in reverse order
        rd = [sum(rcv[j + 1:]) for j in range(N)]
        out = k.empty(sum(rcv), dt)
        want_rev = np.concatenate([np.full(rcv[j], 10 * j + R) for j in reversed(range(N))])
        check(f"{k.name} ialltoallv rdispls {dt}",
              k.values(w.ialltoallv(x, sc, out, rcv, None, rd, **kw).wait(), dt), want_rev)


def test_bytes(k):
    """A dtype hcomm does not reduce (int16) still moves: as bytes."""
    if k.name == "numpy":
        mk = lambda v: np.asarray(v, dtype=np.int16)  # noqa: E731
        vv = np.asarray
    else:
        mk = lambda v: torch.tensor(np.asarray(v), dtype=torch.int16)  # noqa: E731
        vv = lambda t: t.numpy()  # noqa: E731
    m = 9
    b = mk(vals(R, m) - 300)
    w.broadcast(b, root=0)
    check(f"{k.name} broadcast int16", vv(b), vals(0, m) - 300)
    out = mk(np.zeros(m * N))
    w.allgather(mk(vals(R, m) * -1), out)
    check(f"{k.name} allgather int16", vv(out), np.concatenate([vals(j, m) * -1 for j in range(N)]))
    sc = [j + 1 for j in range(N)]
    rcv = [R + 1] * N
    out = mk(np.zeros(sum(rcv)))
    w.alltoallv(mk(np.concatenate([np.full(sc[j], -R - 1) for j in range(N)])), sc, out, rcv)
    check(f"{k.name} alltoallv int16", vv(out), np.concatenate([np.full(R + 1, -j - 1) for j in range(N)]))
    try:
        w.allreduce(mk(vals(R, m)))
        failures.append(f"rank {R}: {k.name} allreduce of int16 did not raise")
    except TypeError as e:
        check(f"{k.name} int16 reduce message", ["does not reduce" in str(e)], [True])


def test_p2p(k):
    m = 1000
    nxt, prv = (R + 1) % N, (R - 1) % N
    for dt in ("float32", "int64", "bfloat16"):
        x, kw = k.make(vals(R, m), dt)
        out = k.empty(m, dt)
        rr = w.irecv(out, prv, tag=5, **kw)
        sr = w.isend(x, nxt, tag=5, **kw)
        check(f"{k.name} isend result", [sr.wait() is None], [True])
        check(f"{k.name} irecv {dt}", k.values(rr.wait(), dt), vals(prv, m))
    # blocking pairs: even ranks send first
    if N % 2 == 0:
        peer = R ^ 1
        x, kw = k.make(vals(R, 64), "float64")
        out = k.empty(64, "float64")
        if R % 2 == 0:
            w.send(x, peer, 3)
            w.recv(out, peer, 3)
        else:
            w.recv(out, peer, 3)
            w.send(x, peer, 3)
        check(f"{k.name} send/recv", k.values(out, "float64"), vals(peer, 64))
    # from any source: every rank sends rank 0 a message of its own values
    if N == 1:
        pass
    elif R == 0:
        seen = []
        for i in range(N - 1):
            out = k.empty(16, "int64")
            if i % 2:
                src = w.recv_any(out, tag=13)
            else:
                src = w.irecv_any(out, tag=13).wait()
            seen.append(src)
            check(f"{k.name} recv_any from {src}", k.values(out, "int64"), vals(src, 16))
        check(f"{k.name} recv_any: each sender once", sorted(seen), list(range(1, N)))
        out = k.empty(16, "int64")
        w.recv(out, hcomm.ANY_SOURCE, 14)  # the plain form takes it too
        check(f"{k.name} recv(ANY_SOURCE)", k.values(out, "int64"), vals(N - 1, 16))
    else:
        x, kw = k.make(vals(R, 16), "int64")
        w.send(x, 0, 13, **kw)
        if R == N - 1:
            w.send(x, 0, 14, **kw)
    # to itself
    x, kw = k.make(vals(R, 8), "int32")
    out = k.empty(8, "int32")
    rr = w.irecv(out, R, tag=9)
    w.send(x, R, 9)
    check(f"{k.name} send to self", k.values(rr.wait(), "int32"), vals(R, 8))


def test_nonblocking(k):
    # several outstanding at once, completed by test() polling and wait_all
    m = 4096
    reqs, outs = [], []
    for i in range(6):
        x, kw = k.make(vals(R, m) + i, "float32")
        reqs.append(w.iallreduce(x, **kw))
        outs.append(i)
    reqs.append(w.ibarrier())
    while not all(r.test() for r in reqs[:3]):
        pass
    res = hcomm.wait_all(reqs)
    for i in range(6):
        check(f"{k.name} outstanding {i}", k.values(res[i], "float32"), reduced(m, hcomm.SUM, "f") + N * i)
    check(f"{k.name} ibarrier result", [res[6] is None], [True])
    check(f"{k.name} done", [all(r.done for r in reqs)], [True])
    # buffers the Request alone keeps alive: no other reference exists
    r1 = w.iallreduce(k.make(vals(R, m), "float64")[0])
    r2 = w.iallgather(k.make(vals(R, 5), "int32")[0], k.empty(5 * N, "int32"))
    gc.collect()
    check(f"{k.name} kept alive", k.values(r1.wait(), "float64"), reduced(m, hcomm.SUM, "f"))
    check(f"{k.name} kept alive 2", k.values(r2.wait(), "int32"),
          np.concatenate([vals(j, 5) for j in range(N)]))
    # a dropped request still completes (its buffer stays referenced)
    x, _ = k.make(vals(R, m), "float32")
    w.iallreduce(x)  # Request dropped at once
    for _ in range(1000):  # the ranks decide together: collectives stay in step
        p = np.array([hcomm._hcomm._pending()], dtype=np.int64)
        if w.iallreduce(p, op=hcomm.MAX).wait()[0] == 0:  # an i-call reaps dropped requests
            break
    check(f"{k.name} dropped request completed", [hcomm._hcomm._pending()], [0])
    check(f"{k.name} dropped request result", k.values(x, "float32"), reduced(m, hcomm.SUM, "f"))


def test_split():
    sub = w.split(R % 2)
    check("split size", [sub.size], [len(range(R % 2, N, 2))])
    check("split rank", [sub.rank], [R // 2])
    x = np.full(10, R, dtype=np.int64)
    sub.allreduce(x)
    check("split allreduce", x, np.full(10, sum(range(R % 2, N, 2))))
    rev = w.split(0, key=N - R)  # reversed order
    check("split key", [rev.rank], [N - 1 - R])
    rev.free()
    none = w.split(hcomm.UNDEFINED if R == 0 else 1)
    check("split undefined", [none is None], [R == 0])
    if none is not None:
        none.free()
    with w.split(0) as dup:
        dup.barrier()
    sub.free()
    try:
        sub.barrier()
        failures.append(f"rank {R}: a freed communicator did not raise")
    except hcomm.Error as e:
        check("freed comm status", [e.status], [hcomm.ERR_INVALID])
    check("module-level", [hcomm.rank(), hcomm.size()], [R, N])
    check("module-level allreduce", hcomm.allreduce(np.ones(3)), np.full(3, N))


class DLPackOnly:
    """A DLPack producer and nothing else (no buffer protocol, no data_ptr)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, *args, **kw):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


class OnGPU:
    """A DLPack producer whose memory is on a CUDA device: refused, never consumed."""

    def __dlpack__(self, *args, **kw):
        raise AssertionError("hcomm consumed a GPU buffer")

    def __dlpack_device__(self):
        return (2, 0)


def test_lists_and_dlpack():
    """allreduce of a list (one hcomm group), and buffers through DLPack."""
    xs = [np.full(m, R + 1, dtype=np.int64) for m in (1, 0, 1000, 70000)] + \
        [np.full(3, R + 0.5), np.full(5, R + 1, dtype=np.float32)]
    got = hcomm.allreduce(xs)
    check("list allreduce returns the list", [got is xs], [True])
    s = N * (N + 1) // 2
    for i, x in enumerate(xs[:4]):
        check(f"list allreduce [{i}]", x, np.full(x.size, s))
    check("list allreduce float64", xs[4], np.full(3, sum(r + 0.5 for r in range(N))))
    check("list allreduce float32", xs[5], np.full(5, s))
    ys = (np.arange(4.0) * (R + 1),)
    w.allreduce(ys, op=hcomm.MAX)
    check("tuple allreduce MAX", ys[0], np.arange(4.0) * N)
    if torch is not None:
        ts = [torch.full((7,), float(R)), torch.full((2,), R, dtype=torch.int32)]
        hcomm.allreduce(ts)
        check("list of tensors", ts[0].numpy(), np.full(7, sum(range(N))))
        check("list of tensors int32", ts[1].numpy(), np.full(2, sum(range(N))))
    check("empty list", [len(hcomm.allreduce([]))], [0])
    for what, fn in (("iallreduce of a list", lambda: w.iallreduce([np.ones(2)])),
                     ("a list with a recvbuf", lambda: w.allreduce([np.ones(2)], np.ones(2))),
                     ("a list with a non-reducible buffer", lambda: w.allreduce([np.ones(2), np.ones(2, np.int16)]))):
        try:
            fn()
            failures.append(f"rank {R}: {what}: no TypeError")
        except TypeError:
            check(what, [1], [1])
    a = np.full(10, R + 1.0, dtype=np.float32)
    w.allreduce(DLPackOnly(a))
    check("DLPack allreduce in place", a, np.full(10, s))
    b = np.arange(6, dtype=np.int32) + R
    out = np.zeros(6 * N, dtype=np.int32)
    w.allgather(DLPackOnly(b), DLPackOnly(out))
    check("DLPack allgather", out, np.concatenate([np.arange(6) + r for r in range(N)]))
    try:
        w.allreduce(OnGPU())
        failures.append(f"rank {R}: a GPU DLPack buffer was not refused")
    except ValueError as e:
        check("GPU DLPack refused: says why", ["GPU memory support" in str(e)], [True])
    try:
        w.allreduce(DLPackOnly(np.zeros((4, 4), dtype=np.float32).T))
        failures.append(f"rank {R}: a non-contiguous DLPack buffer was not refused")
    except ValueError as e:
        check("non-contiguous DLPack refused", ["contiguous" in str(e)], [True])


def test_torch_backend(store_dir):
    import torch.distributed as dist
    import hcomm.torch  # noqa: F401
    holds = hcomm._hcomm._holds()[0]
    dist.init_process_group("hcomm", init_method="file://" + os.path.join(store_dir, "store"),
                            rank=R, world_size=N)
    check("torch pg reused the world", [hcomm._hcomm._holds()[0]], [holds + 1])
    t = torch.full((33,), float(R))
    dist.all_reduce(t)
    check("torch allreduce beside the module", t.numpy(), np.full(33, sum(range(N))))
    x = np.full(5, R, dtype=np.float32)
    w.allreduce(x)  # the module, interleaved
    work = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    work.wait()
    check("torch allreduce async", t.numpy(), np.full(33, sum(range(N))))
    dist.destroy_process_group()
    check("torch pg released its hold", [hcomm._hcomm._holds()[0]], [holds])


kits = [Numpy()] + ([Torch()] if torch is not None else [])
for k in kits:
    for t in (test_allreduce, test_rooted, test_gathers, test_vector, test_bytes, test_p2p,
              test_nonblocking):
        t(k)
test_split()
test_lists_and_dlpack()
if torch is not None and args.store_dir:
    import hcomm_autoload
    why = hcomm_autoload.check(torch.__version__)
    if why:  # Debian's torch 1.13, say: the module ran on it, the backend cannot
        print(f"rank {R}: the torch backend part skipped: {why}")
    else:
        test_torch_backend(args.store_dir)
w.barrier()
hcomm.finalize()
check("finalized", [hcomm.initialized()], [False])

for f in failures[:20]:
    print("FAIL:", f)
print(f"rank {R}/{N}: {checks} checks ({', '.join(k.name for k in kits)}), {len(failures)} failed")
sys.exit(1 if failures else 0)
