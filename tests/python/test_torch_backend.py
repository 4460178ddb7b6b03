"""torch.distributed with backend="hcomm": every operation the process group
implements, checked element-wise against values computed locally.

    test_torch_backend.py NRANKS

Ranks are torch.multiprocessing processes; the group is made by
init_process_group("hcomm", init_method="file://...") (the store path: rank
0 hands hcomm_bootstrap_address()'s strings to the others). Exit 0: pass,
1: a check failed, 77: torch or the backend unavailable.
"""
import os
import sys
import tempfile
import traceback
from datetime import timedelta

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as e:
    print(f"SKIP: torch unavailable: {e}")
    sys.exit(77)

RO = dist.ReduceOp


class Checker:
    def __init__(self, rank):
        self.rank, self.n, self.fail = rank, 0, []

    def eq(self, name, got, want):
        self.n += 1
        got = got.double() if got.dtype != torch.bool else got
        want = torch.as_tensor(want).to(got.dtype)
        if want.numel() == got.numel():
            want = want.reshape(got.shape)
        if got.shape != want.shape or not torch.equal(got, want):
            self.fail.append(f"rank {self.rank}: {name}: got {got.flatten()[:8].tolist()} "
                             f"want {want.flatten()[:8].tolist()}")

    def true(self, name, cond):
        self.n += 1
        if not cond:
            self.fail.append(f"rank {self.rank}: {name}")

    def raises(self, name, fn, words):
        self.n += 1
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            for wd in words:
                if wd not in str(e):
                    self.fail.append(f"rank {self.rank}: {name}: {wd!r} not in {e}")
            return
        self.fail.append(f"rank {self.rank}: {name}: did not raise")


def vals(rank, m, prod=False):
    i = torch.arange(m, dtype=torch.float64)
    return 1 + (i + rank) % 2 if prod else (i % 5) + rank + 1


def run(rank, size, store, out):
    torch.set_num_threads(1)
    import hcomm
    import hcomm.torch  # noqa: F401
    c = Checker(rank)
    try:
        dist.init_process_group("hcomm", init_method="file://" + store, rank=rank,
                                world_size=size, timeout=timedelta(seconds=120))
        body(c, rank, size, hcomm)
        dist.destroy_process_group()
        c.true("hcomm finalized with the group", not hcomm.initialized())
    except Exception:  # noqa: BLE001
        c.fail.append(f"rank {rank}: exception:\n{traceback.format_exc()}")
    torch.save({"n": c.n, "fail": c.fail}, os.path.join(out, f"r{rank}.pt"))


def body(c, rank, size, hcomm):
    N = size
    c.true("backend name", dist.get_backend() == "hcomm")
    c.true("rank/size", (dist.get_rank(), dist.get_world_size()) == (rank, size))
    per = lambda m, prod=False: torch.stack([vals(j, m, prod) for j in range(N)])  # noqa: E731
    floats = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
    ints = [torch.int8, torch.uint8, torch.int32, torch.int64]
    # allreduce: every ReduceOp, every dtype, sync and async
    for dt in floats + ints:
        for op, ref in ((RO.SUM, per(17).sum(0)), (RO.PRODUCT, per(17, True).prod(0)),
                        (RO.MIN, per(17).min(0).values), (RO.MAX, per(17).max(0).values),
                        (RO.AVG, per(17).sum(0) / N)):
            if op == RO.AVG and not dt.is_floating_point:
                ref = torch.div(per(17).sum(0), N, rounding_mode="trunc")
            t = vals(rank, 17, op == RO.PRODUCT).to(dt)
            if (dt.is_floating_point):
                work = dist.all_reduce(t, op=op, async_op=True)
                c.true(f"allreduce {dt} {op} work wait", work.wait())
                c.true(f"allreduce {dt} {op} completed", work.is_completed() and work.is_success())
            else:
                dist.all_reduce(t, op=op)
            c.eq(f"allreduce {dt} {op}", t, ref)
    for dt in ints + [torch.bool]:
        for op, fn in ((RO.BAND, torch.bitwise_and), (RO.BOR, torch.bitwise_or),
                       (RO.BXOR, torch.bitwise_xor)):
            mk = lambda r: (torch.arange(11) * 7 + r * 3) % (2 if dt == torch.bool else 100)  # noqa: E731
            t = mk(rank).to(dt)
            ref = mk(0).to(dt)
            for j in range(1, N):
                ref = fn(ref, mk(j).to(dt))
            dist.all_reduce(t, op=op)
            c.eq(f"allreduce {dt} {op}", t, ref)
    t = vals(rank, 9)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    c.eq("allreduce PREMUL_SUM", t, per(9).sum(0) * 0.5)
    # a future, and a callback chained on it
    t = vals(rank, 6).float()
    fut = dist.all_reduce(t, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    c.eq("future value", fut.wait()[0], per(6).sum(0))
    c.eq("future then", doubled.wait(), per(6).sum(0) * 2)
    # allreduce_coalesced
    ts = [vals(rank, 3).float(), vals(rank, 5).float()]
    dist.all_reduce_coalesced(ts)
    c.eq("allreduce_coalesced 0", ts[0], per(3).sum(0))
    c.eq("allreduce_coalesced 1", ts[1], per(5).sum(0))
    # broadcast, including a dtype hcomm moves as bytes
    for dt in (torch.float32, torch.bfloat16, torch.int16, torch.bool, torch.complex64):
        t = (vals(rank, 10) % 2).to(dt) if dt == torch.bool else vals(rank, 10).to(dt)
        dist.broadcast(t, src=N - 1)
        want = (vals(N - 1, 10) % 2).to(dt) if dt == torch.bool else vals(N - 1, 10).to(dt)
        c.true(f"broadcast {dt}", torch.equal(t, want))
    # reduce: every op, to a root that is not 0
    root = 1 % N
    for op, ref in ((RO.SUM, per(8).sum(0)), (RO.MAX, per(8).max(0).values),
                    (RO.PRODUCT, per(8, True).prod(0)), (RO.MIN, per(8).min(0).values)):
        t = vals(rank, 8, op == RO.PRODUCT).float()
        orig = t.clone()
        dist.reduce(t, dst=root, op=op)
        c.eq(f"reduce {op}", t, ref if rank == root else orig)
    t = (torch.arange(8) + rank).int()
    dist.reduce(t, dst=0, op=RO.BOR)
    if rank == 0:
        ref = torch.arange(8).int()
        for j in range(1, N):
            ref |= (torch.arange(8) + j).int()
        c.eq("reduce BOR", t, ref)
    # allgather: separate tensors (staged) and adjacent views (direct)
    outs = [torch.zeros(4) for _ in range(N)]
    dist.all_gather(outs, vals(rank, 4).float())
    for j in range(N):
        c.eq(f"allgather [{j}]", outs[j], vals(j, 4))
    flat = torch.zeros(N, 4, dtype=torch.bfloat16)
    dist.all_gather(list(flat.unbind(0)), vals(rank, 4).bfloat16())
    c.eq("allgather adjacent", flat, per(4))
    big = torch.zeros(N * 6, dtype=torch.int64)
    dist.all_gather_into_tensor(big, vals(rank, 6).long())
    c.eq("all_gather_into_tensor", big, per(6).flatten())
    # gather / scatter
    g = [torch.zeros(3) for _ in range(N)] if rank == 0 else None
    dist.gather(vals(rank, 3).float(), g, dst=0)
    if rank == 0:
        for j in range(N):
            c.eq(f"gather [{j}]", g[j], vals(j, 3))
    s = torch.zeros(5, dtype=torch.float16)
    src = [vals(j, 5).half() * 3 for j in range(N)] if rank == N - 1 else None
    dist.scatter(s, src, src=N - 1)
    c.eq("scatter", s, vals(rank, 5) * 3)
    # reduce_scatter: list, tensor, and ops
    for op, ref in ((RO.SUM, lambda r: per(7).sum(0) * (r + 1)), (RO.MAX, lambda r: per(7).max(0).values * (r + 1))):
        out = torch.zeros(7)
        dist.reduce_scatter(out, [vals(rank, 7).float() * (j + 1) for j in range(N)], op=op)
        c.eq(f"reduce_scatter {op}", out, ref(rank))
    out = torch.zeros(7, dtype=torch.int32)
    inp = torch.cat([vals(rank, 7) * (j + 1) for j in range(N)]).int()
    dist.reduce_scatter_tensor(out, inp)
    c.eq("reduce_scatter_tensor", out, per(7).sum(0) * (rank + 1))
    out = torch.zeros(7, dtype=torch.int64)
    dist.reduce_scatter(out, [(torch.arange(7) + rank * j) for j in range(N)], op=RO.BXOR)
    ref = torch.zeros(7, dtype=torch.int64)
    for j in range(N):
        ref ^= torch.arange(7) + j * rank
    c.eq("reduce_scatter BXOR", out, ref)
    # alltoall: equal splits, uneven splits (rows of 3), lists
    inp = torch.cat([torch.full((2,), 10.0 * rank + j) for j in range(N)])
    out = torch.zeros(2 * N)
    dist.all_to_all_single(out, inp)
    c.eq("all_to_all_single", out, torch.cat([torch.full((2,), 10.0 * j + rank) for j in range(N)]))
    ins = [(rank + j) % 3 for j in range(N)]
    outs_n = [(j + rank) % 3 for j in range(N)]
    inp = torch.cat([torch.full((ins[j], 3), 10 * rank + j, dtype=torch.int32) for j in range(N)])
    out = torch.zeros(sum(outs_n), 3, dtype=torch.int32)
    dist.all_to_all_single(out, inp, output_split_sizes=outs_n, input_split_sizes=ins)
    c.eq("all_to_all_single uneven", out,
         torch.cat([torch.full((outs_n[j], 3), 10 * j + rank, dtype=torch.int32) for j in range(N)]))
    outl = [torch.zeros(j + 1) for j in range(N)]
    dist.all_to_all(outl, [torch.full((rank + 1,), 10.0 * rank + j) for j in range(N)])
    for j in range(N):
        c.eq(f"all_to_all [{j}]", outl[j], torch.full((j + 1,), 10.0 * j + rank))
    # barrier, send/recv (blocking and isend/irecv), tags
    dist.barrier()
    nxt, prv = (rank + 1) % N, (rank - 1) % N
    r = torch.zeros(1000)
    rq = dist.irecv(r, prv, tag=3)
    sq = dist.isend(vals(rank, 1000).float(), nxt, tag=3)
    sq.wait()
    rq.wait()
    c.eq("isend/irecv", r, vals(prv, 1000))
    if rank == 0:
        dist.send(torch.arange(5, dtype=torch.bfloat16), N - 1)
    elif rank == N - 1:
        r = torch.zeros(5, dtype=torch.bfloat16)
        dist.recv(r, 0)
        c.eq("send/recv bfloat16", r, torch.arange(5))
    # recv from any source (recvAnysource): every rank sends rank 0 its rank;
    # dist.recv without src returns the sender, and the data is that sender's
    if rank == 0:
        got = []
        for _ in range(N - 1):
            r = torch.zeros(4)
            src = dist.recv(r, tag=11)
            got.append(src)
            c.eq(f"recv from any source ({src})", r, torch.full((4,), float(src)))
        c.eq("recv from any source: every sender once", torch.tensor(sorted(got)),
             torch.arange(1, N))
        rq = dist.irecv(torch.zeros(4), tag=12)  # non-blocking: source after wait
        rq.wait()
        c.eq("irecv from any source", torch.tensor([rq._source_rank()]), torch.tensor([N - 1]))
    else:
        dist.send(torch.full((4,), float(rank)), 0, tag=11)
        if rank == N - 1:
            dist.send(torch.zeros(4), 0, tag=12)
    # a second group of the whole world (its own communicator)
    g2 = dist.new_group(list(range(N)))
    t = torch.ones(3)
    dist.all_reduce(t, group=g2)
    c.eq("new_group of the world", t, torch.full((3,), float(N)))
    # refusals: raised at the call, the group stays usable
    c.raises("non-contiguous", lambda: dist.all_reduce(torch.zeros(4, 4).t()), ["contiguous"])
    c.raises("int16 reduce", lambda: dist.all_reduce(torch.zeros(4, dtype=torch.int16)),
             ["does not reduce"])
    c.raises("group larger than the world",
             lambda: hcomm.torch.create(dist.HashStore(), 0, N + 1, timedelta(seconds=5)),
             ["over a world of"])
    t = torch.ones(2)
    dist.all_reduce(t)
    c.eq("usable after refusals", t, torch.full((2,), float(N)))
    dist.destroy_process_group(g2)
    # past the group's timeout an operation aborts the group's communicator
    g3 = dist.new_group(list(range(N)), timeout=timedelta(seconds=1))
    if rank == 0:
        work = dist.irecv(torch.zeros(4), src=1, tag=77, group=g3)  # never sent
        c.raises("timeout", work.wait, ["timeout", "aborted", "ERR_ABORTED"])
        c.raises("aborted group", lambda: dist.all_reduce(torch.ones(1), group=g3), ["ERR_ABORTED"])
    dist.destroy_process_group(g3)
    dist.barrier()
    subsets(c, rank, size, hcomm)


def subsets(c, rank, size, hcomm):
    """Groups of some of the world's ranks: only the members call them."""
    # a group of one, on a store of its own (every rank makes its own)
    g1 = hcomm.torch.create(dist.HashStore(), 0, 1, timedelta(seconds=30))
    t = vals(rank, 5)
    g1.allreduce([t]).wait()
    c.eq("group of one", t, vals(rank, 5))
    c.true("group of one size", (g1.rank(), g1.size()) == (0, 1))
    del g1
    if size != 4:
        return
    # torch orders a group's ranks by world rank (new_group sorts them)
    groups = [[0, 2], [1, 3], [3, 1, 0]]
    pgs = [dist.new_group(m) for m in groups]  # every rank calls new_group
    for m, g in zip(groups, pgs):
        if rank not in m:
            c.true(f"{m}: non-member", g == dist.GroupMember.NON_GROUP_MEMBER)
            continue
        ms = sorted(m)
        c.true(f"{m}: rank/size", (dist.get_rank(g), dist.get_world_size(g)) == (ms.index(rank), len(m)))
        t = vals(rank, 7)
        dist.all_reduce(t, group=g)
        c.eq(f"{m}: allreduce", t, sum(vals(j, 7) for j in m))
        t = torch.full((4,), float(rank), dtype=torch.float32)
        dist.all_reduce(t, op=RO.MAX, group=g)
        c.eq(f"{m}: allreduce MAX", t, torch.full((4,), float(max(m))))
        src = m[-1]  # a world rank
        t = vals(rank, 6).int()
        dist.broadcast(t, src=src, group=g)
        c.eq(f"{m}: broadcast from {src}", t, vals(src, 6))
        outs = [torch.zeros(3) for _ in m]
        dist.all_gather(outs, vals(rank, 3).float(), group=g)
        for j, r in enumerate(ms):
            c.eq(f"{m}: allgather [{j}]", outs[j], vals(r, 3))
        dist.barrier(group=g)
    # the members in an order other than the world's: the backend made
    # directly on a store of the group's (ranks [3, 1, 0] are group ranks 0, 1, 2)
    order = [3, 1, 0]
    if rank in order:
        st = dist.PrefixStore("hcomm_test_order", dist.distributed_c10d._get_default_store())
        g = hcomm.torch.create(st, order.index(rank), len(order), timedelta(seconds=60))
        c.true("[3,1,0] order: rank/size", (g.rank(), g.size()) == (order.index(rank), 3))
        outs = [torch.zeros(4) for _ in order]
        g.allgather([outs], [vals(rank, 4).float()]).wait()
        for j, r in enumerate(order):
            c.eq(f"[3,1,0] order: allgather [{j}]", outs[j], vals(r, 4))
        t = vals(rank, 4)
        g.broadcast([t], dist.BroadcastOptions()).wait()  # root: group rank 0, world rank 3
        c.eq("[3,1,0] order: broadcast from group rank 0", t, vals(3, 4))
        t = vals(rank, 4)
        g.allreduce([t]).wait()
        c.eq("[3,1,0] order: allreduce", t, sum(vals(r, 4) for r in order))
        g.barrier().wait()
        del g
    for g in pgs:
        if g != dist.GroupMember.NON_GROUP_MEMBER:
            dist.destroy_process_group(g)
    dist.barrier()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(n, os.path.join(tmp, "store"), tmp), nprocs=n)
        res = [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(n)]
    fails = [f for x in res for f in x["fail"]]
    for f in fails[:30]:
        print("FAIL:", f)
    print(f"{n} ranks: {sum(x['n'] for x in res)} checks, {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
