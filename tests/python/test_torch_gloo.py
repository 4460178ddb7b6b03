"""The hcomm backend against gloo: every operation torch's collectives API
has, on the same inputs through both backends, must give the same tensors.

    test_torch_gloo.py NRANKS

Phase 1: the default group is gloo and `new_group(backend="hcomm")` the
same ranks; every op x every dtype both backends take, in place and out of
place, uneven sizes (0, 1, 7 and 1027 elements), groups of some ranks,
coalescing (batch_isend_irecv, _coalescing_manager), split_group.
Values are small integers so that every sum and product is exact in every
dtype and any order of addition: bit-identical results are required.
Phase 2: init_process_group("hcomm") itself: the backend's name and
options, float32 sums of random values against float64 within the rounding
bound (several large ones in flight), DeviceMesh 2x2 (4 ranks) with DTensor, a group that mixes hcomm
for the CPU with gloo for CUDA, wait(timeout), abort.
Exit 0: pass, 1: a mismatch, 77: torch or the backend unavailable.
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
SIZES = (0, 1, 7, 1027)
FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)


class Checker:
    def __init__(self, rank):
        self.rank, self.n, self.fail = rank, 0, []

    def same(self, name, got, want):
        self.n += 1
        if isinstance(got, (list, tuple)):
            ok = len(got) == len(want) and all(g.shape == w.shape and torch.equal(g, w) for g, w in zip(got, want))
        else:
            ok = got.shape == want.shape and got.dtype == want.dtype and torch.equal(got, want)
        if not ok:
            g = got if not isinstance(got, (list, tuple)) else torch.cat([x.flatten() for x in got])
            w = want if not isinstance(want, (list, tuple)) else torch.cat([x.flatten() for x in want])
            self.fail.append(f"rank {self.rank}: {name}: hcomm {g.flatten()[:6].tolist()} "
                             f"gloo {w.flatten()[:6].tolist()}")

    def true(self, name, cond):
        self.n += 1
        if not cond:
            self.fail.append(f"rank {self.rank}: {name}")

    def raises(self, name, fn, words):
        self.n += 1
        try:
            fn()
        except Exception as e:  # noqa: BLE001
            missing = [w for w in words if w not in str(e)]
            if missing:
                self.fail.append(f"rank {self.rank}: {name}: {missing} not in {e}")
            return
        self.fail.append(f"rank {self.rank}: {name}: did not raise")


def data(rank, m, dt, salt=0, prod=False):
    """Small integers (exact in every dtype): 1..2 for products, else 0..7."""
    i = torch.arange(m, dtype=torch.int64)
    v = 1 + (i + rank + salt) % 2 if prod else (i * 3 + rank * 5 + salt) % 8
    return v.to(dt)


def both(c, name, gl, hc, fn, outs, ref=None):
    """fn(group) fills the tensors outs(group) returns; compare hcomm's with
    gloo's (or ref(), the expected tensors, where this torch's gloo lacks the op)."""
    try:
        fn(gl)
        want = [t.clone() for t in outs(gl)]
    except RuntimeError as e:
        if ref is None or "does not support" not in str(e):
            raise
        want = ref()
    fn(hc)
    c.same(name, outs(hc), want)


def ops_vs_gloo(c, rank, n, gl, hc):
    ranks = dist.get_process_group_ranks(gl)
    me = ranks.index(rank) if rank in ranks else -1
    n = len(ranks)
    for dt in FLOATS + INTS:
        for m in SIZES:
            for op in (RO.SUM, RO.PRODUCT, RO.MIN, RO.MAX):
                st = {}
                both(c, f"allreduce {dt} {m} {op}", gl, hc,
                     lambda g: st.__setitem__(g, data(rank, m, dt, 1, op == RO.PRODUCT)) or
                     dist.all_reduce(st[g], op=op, group=g), lambda g: [st[g]])
            root = ranks[(m + 1) % n]
            st = {}
            both(c, f"reduce {dt} {m}", gl, hc,
                 lambda g: st.__setitem__(g, data(rank, m, dt, 2)) or dist.reduce(st[g], root, group=g),
                 lambda g: [st[g]] if rank == root else [])  # elsewhere unspecified (gloo writes there)
            both(c, f"broadcast {dt} {m}", gl, hc,
                 lambda g: st.__setitem__(g, data(rank, m, dt, 3)) or dist.broadcast(st[g], root, group=g),
                 lambda g: [st[g]])
            lists = {}
            both(c, f"all_gather {dt} {m}", gl, hc,
                 lambda g: lists.__setitem__(g, [torch.zeros(m, dtype=dt) for _ in range(n)]) or
                 dist.all_gather(lists[g], data(rank, m, dt, 4), group=g), lambda g: lists[g])
            # into a tensor: out of place, and in place (the input is this rank's block)
            both(c, f"all_gather_into_tensor {dt} {m}", gl, hc,
                 lambda g: st.__setitem__(g, torch.zeros(n * m, dtype=dt)) or
                 dist.all_gather_into_tensor(st[g], data(rank, m, dt, 5), group=g), lambda g: [st[g]])

            def ag_inplace(g):
                st[g] = torch.zeros(n * m, dtype=dt)
                blk = st[g][me * m:(me + 1) * m]
                blk.copy_(data(rank, m, dt, 6))
                dist.all_gather_into_tensor(st[g], blk, group=g)
            both(c, f"all_gather_into_tensor in place {dt} {m}", gl, hc, ag_inplace, lambda g: [st[g]])
            both(c, f"all_to_all_single {dt} {m}", gl, hc,
                 lambda g: st.__setitem__(g, torch.zeros(n * m, dtype=dt)) or
                 dist.all_to_all_single(st[g], data(rank, n * m, dt, 7), group=g), lambda g: [st[g]])
            if dt in (torch.float16, torch.bfloat16, torch.int8, torch.uint8) and m == 1027:
                continue  # gloo's reduce_scatter takes fewer dtypes; the others cover it
            for op in (RO.SUM, RO.MAX):
                both(c, f"reduce_scatter {dt} {m} {op}", gl, hc,
                     lambda g: st.__setitem__(g, torch.zeros(m, dtype=dt)) or
                     dist.reduce_scatter(st[g], [data(rank, m, dt, 8 + j) for j in range(n)], op=op, group=g),
                     lambda g: [st[g]])
            both(c, f"reduce_scatter_tensor {dt} {m}", gl, hc,
                 lambda g: st.__setitem__(g, torch.zeros(m, dtype=dt)) or
                 dist.reduce_scatter_tensor(st[g], data(rank, n * m, dt, 9), group=g), lambda g: [st[g]])
    for dt in INTS + (torch.bool,):
        for op in (RO.BAND, RO.BOR, RO.BXOR):
            st = {}
            both(c, f"allreduce {dt} {op}", gl, hc,
                 lambda g: st.__setitem__(g, data(rank, 33, dt, 10)) or dist.all_reduce(st[g], op=op, group=g),
                 lambda g: [st[g]])
    # AVG and PREMUL_SUM (gloo has neither): against gloo's SUM
    for dt in FLOATS:
        want = data(rank, 64, dt, 11)
        dist.all_reduce(want, group=gl)
        t = data(rank, 64, dt, 11)
        dist.all_reduce(t, op=RO.AVG, group=hc)
        c.same(f"allreduce AVG {dt}", t, want / n)
        t = data(rank, 64, dt, 11)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5), group=hc)
        c.same(f"allreduce PREMUL_SUM(0.5) {dt}", t, want * 0.5)
        t = data(rank, 64, dt, 11)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([2.0], dtype=dt)), group=hc)
        c.same(f"allreduce PREMUL_SUM(tensor 2) {dt}", t, want * 2)
    # gather / scatter to and from every root
    for root in ranks:
        lists = {}
        both(c, f"gather to {root}", gl, hc,
             lambda g: lists.__setitem__(g, [torch.zeros(5) for _ in range(n)] if rank == root else None) or
             dist.gather(data(rank, 5, torch.float32, 12), lists[g], dst=root, group=g),
             lambda g: lists[g] or [])
        st = {}
        both(c, f"scatter from {root}", gl, hc,
             lambda g: st.__setitem__(g, torch.zeros(6, dtype=torch.int64)) or
             dist.scatter(st[g], [data(j, 6, torch.int64, 13) for j in range(n)] if rank == root else None,
                          src=root, group=g), lambda g: [st[g]])
    # uneven all_to_all_single (rows of 3) and all_to_all of lists
    ins = [(me + j) % 3 for j in range(n)]
    outs_n = [(j + me) % 3 for j in range(n)]
    st = {}
    both(c, "all_to_all_single uneven", gl, hc,
         lambda g: st.__setitem__(g, torch.zeros(sum(outs_n), 3)) or
         dist.all_to_all_single(st[g], data(rank, 3 * sum(ins), torch.float32, 14).view(-1, 3),
                                output_split_sizes=outs_n, input_split_sizes=ins, group=g), lambda g: [st[g]])
    lists = {}
    both(c, "all_to_all lists", gl, hc,
         lambda g: lists.__setitem__(g, [torch.zeros(4) for j in range(n)]) or
         dist.all_to_all(lists[g], [data(rank + j, 4, torch.float32, 15) for j in range(n)], group=g),
         lambda g: lists[g], ref=lambda: [data(ranks[j] + me, 4, torch.float32, 15) for j in range(n)])
    # point to point: a ring, blocking and not, and batch_isend_irecv (coalesced)
    nxt, prv = ranks[(me + 1) % n], ranks[(me - 1) % n]
    for g, name in ((gl, "gloo"), (hc, "hcomm")):
        r = torch.zeros(100)
        ops = [dist.P2POp(dist.isend, data(rank, 100, torch.float32, 16), nxt, g),
               dist.P2POp(dist.irecv, r, prv, g)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        c.same(f"batch_isend_irecv {name}", r, data(prv, 100, torch.float32, 16))
    # _coalescing_manager: allreduces posted as one hcomm group
    ts = [data(rank, m, torch.float32, 17) for m in (3, 0, 500, 1)]
    want = [t.clone() for t in ts]
    for t in want:
        dist.all_reduce(t, group=gl)
    with dist._coalescing_manager(group=hc, device=torch.device("cpu"), async_ops=True) as cm:
        for t in ts:
            dist.all_reduce(t, group=hc)
    cm.wait()
    c.same("coalescing manager allreduce", ts, want)
    outs = [torch.zeros(n * 4), torch.zeros(n * 2)]
    with dist._coalescing_manager(group=hc, device=torch.device("cpu"), async_ops=True) as cm:
        dist.all_gather_into_tensor(outs[0], data(rank, 4, torch.float32, 18), group=hc)
        dist.all_gather_into_tensor(outs[1], data(rank, 2, torch.float32, 19), group=hc)
    cm.wait()
    want = [torch.zeros(n * 4), torch.zeros(n * 2)]
    dist.all_gather_into_tensor(want[0], data(rank, 4, torch.float32, 18), group=gl)
    dist.all_gather_into_tensor(want[1], data(rank, 2, torch.float32, 19), group=gl)
    c.same("coalescing manager all_gather_into_tensor", outs, want)
    outs = [torch.zeros(4), torch.zeros(2)]
    with dist._coalescing_manager(group=hc, device=torch.device("cpu"), async_ops=True) as cm:
        dist.reduce_scatter_tensor(outs[0], data(rank, n * 4, torch.float32, 20), group=hc)
        dist.reduce_scatter_tensor(outs[1], data(rank, n * 2, torch.float32, 21), group=hc)
    cm.wait()
    want = [torch.zeros(4), torch.zeros(2)]
    dist.reduce_scatter_tensor(want[0], data(rank, n * 4, torch.float32, 20), group=gl)
    dist.reduce_scatter_tensor(want[1], data(rank, n * 2, torch.float32, 21), group=gl)
    c.same("coalescing manager reduce_scatter_tensor", outs, want)


def phase1(c, rank, n, store):
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=n,
                            timeout=timedelta(seconds=120))
    hc = dist.new_group(backend="hcomm")
    c.true("new_group backend", dist.get_backend(hc) == "hcomm")
    ops_vs_gloo(c, rank, n, dist.group.WORLD, hc)
    # groups of some ranks, made by both backends (every rank calls new_group)
    subsets = [[0, n - 1]] + ([[1, 2], [0, 2, 3]] if n == 4 else [])
    for m in subsets:
        gg, hh = dist.new_group(m, backend="gloo"), dist.new_group(m, backend="hcomm")
        if rank in m:
            st = {}
            both(c, f"{m}: allreduce", gg, hh,
                 lambda g: st.__setitem__(g, data(rank, 9, torch.float32)) or dist.all_reduce(st[g], group=g),
                 lambda g: [st[g]])
            both(c, f"{m}: broadcast from {m[-1]}", gg, hh,
                 lambda g: st.__setitem__(g, data(rank, 9, torch.int32)) or dist.broadcast(st[g], m[-1], group=g),
                 lambda g: [st[g]])
            lists = {}
            both(c, f"{m}: all_gather", gg, hh,
                 lambda g: lists.__setitem__(g, [torch.zeros(3) for _ in m]) or
                 dist.all_gather(lists[g], data(rank, 3, torch.float32), group=g), lambda g: lists[g])
    if dist.group.WORLD.bound_device_id is not None or torch.__version__ >= "2.15":
        split(c, rank, n, hc)  # torch < 2.15 splits only when the default group is bound to a device
    dist.destroy_process_group()


def split(c, rank, n, parent):
    """split_group of an hcomm group (hcomm_comm_split): halves, and a rank left out."""
    halves = [list(range(0, n // 2)), list(range(n // 2, n))] if n >= 2 else [[0]]
    sp = dist.split_group(parent_pg=parent, split_ranks=halves)
    mine = [h for h in halves if rank in h][0]
    c.true("split_group backend", sp is not None and dist.get_backend(sp) == "hcomm")
    c.true("split_group size", dist.get_world_size(sp) == len(mine))
    t = data(rank, 11, torch.float32)
    dist.all_reduce(t, group=sp)
    c.same("split_group allreduce", t, sum(data(r, 11, torch.float32) for r in mine))
    some = [list(range(1, n))]  # rank 0 in no split: takes part, gets no group
    sp = dist.split_group(parent_pg=parent, split_ranks=some)
    c.true("split_group of some: rank 0 gets none", (sp in (None, dist.GroupMember.NON_GROUP_MEMBER)) == (rank == 0))
    if rank != 0:
        t = data(rank, 5, torch.float32)
        dist.all_reduce(t, group=sp)
        c.same("split_group of some: allreduce", t, sum(data(r, 5, torch.float32) for r in range(1, n)))


def noise(rank, m, seed):
    g = torch.Generator().manual_seed(1000 * seed + rank)
    return torch.randn(m, generator=g) * (1 + rank)


def float_sums(c, rank, n):
    """float32 sums of random values, DDP's way (buckets of 1M to 4M
    elements, several in flight): each element within n * 2^-24 of the sum
    of the magnitudes of the exact (float64) sum. Any order of addition
    keeps to that bound; a lost, doubled or misplaced chunk does not."""
    sizes = (1 << 20, 4_000_000, 2048, (1 << 20) + 7, 8)
    ts = [noise(rank, m, i) for i, m in enumerate(sizes)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for w in works:
        w.wait()
    for i, (m, t) in enumerate(zip(sizes, ts)):
        parts = [noise(r, m, i).double() for r in range(n)]
        want = sum(parts)
        scale = sum(p.abs() for p in parts).clamp_min(1e-300)
        err = float(((t.double() - want).abs() / scale).max())
        c.true(f"float32 allreduce of {m} elements within {n} * 2^-24 (got {err:.3g})", err <= n * 2.0 ** -24)


def phase2(c, rank, n, store):
    import hcomm.torch as ht
    kw = dict(init_method="file://" + store, rank=rank, world_size=n, timeout=timedelta(seconds=120))
    if torch.__version__ >= "2.15":  # a CPU device_id: torch 2.11 takes accelerators only
        kw["device_id"] = torch.device("cpu", 0)
    dist.init_process_group("hcomm", **kw)
    c.true("default backend", dist.get_backend() == "hcomm")
    if "device_id" in kw:
        split(c, rank, n, dist.group.WORLD)  # the default group, bound to a device
    elif rank == 0:
        print(f"note: torch {torch.__version__} splits only groups bound to an accelerator: split_group not run")
    pg = dist.group.WORLD
    be = pg._get_backend(torch.device("cpu"))
    c.true("getBackendName", be.name() == "hcomm")
    c.true("supports splitting", be.supports_splitting)
    t = data(rank, 10, torch.float32)
    dist.all_reduce(t)
    c.same("allreduce on the default group", t, sum(data(r, 10, torch.float32) for r in range(n)))
    float_sums(c, rank, n)
    if n == 4:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
        for dim, peers in (("dp", [rank % 2, rank % 2 + 2]), ("tp", [rank // 2 * 2, rank // 2 * 2 + 1])):
            g = mesh.get_group(dim)
            c.true(f"mesh {dim} backend", dist.get_backend(g) == "hcomm")
            t = data(rank, 6, torch.float32)
            dist.all_reduce(t, group=g)
            c.same(f"mesh {dim} allreduce", t, sum(data(r, 6, torch.float32) for r in peers))
        full = torch.arange(32, dtype=torch.float32).view(8, 4)
        d = distribute_tensor(full, mesh, [Shard(0), Shard(1)])
        c.same("DTensor full_tensor", d.full_tensor(), full)
        c.same("DTensor redistribute", d.redistribute(mesh, [Replicate(), Replicate()]).to_local(), full)
    # options: a timeout of its own
    g = dist.new_group(backend="hcomm", pg_options=ht.Options(timeout=timedelta(seconds=7)))
    c.true("Options timeout", abs(g._get_backend(torch.device("cpu")).timeout.total_seconds() - 7) < 1e-3)
    # wait(timeout): a receive nobody sends raises, naming the op, and stays in flight
    if rank == 0:
        w = dist.irecv(torch.zeros(3), src=1, tag=99, group=g)
        c.raises("wait(timeout)", lambda: w.wait(timedelta(milliseconds=200)), ["hcomm recv", "wait(timeout"])
        g._get_backend(torch.device("cpu")).abort()  # pending operations end now
        c.raises("after abort", w.wait, ["ERR_ABORTED"])
    dist.destroy_process_group(g)
    # a group that mixes hcomm for CPU tensors with gloo for CUDA ones
    mx = dist.new_group(backend="cpu:hcomm,cuda:gloo")
    c.true("mixed: cpu backend", mx._get_backend(torch.device("cpu")).name() == "hcomm")
    t = data(rank, 5, torch.float32)
    dist.all_reduce(t, group=mx)
    c.same("mixed group allreduce", t, sum(data(r, 5, torch.float32) for r in range(n)))
    dist.destroy_process_group()


def run(rank, n, tmp):
    torch.set_num_threads(1)
    import hcomm.torch  # noqa: F401
    c = Checker(rank)
    try:
        phase1(c, rank, n, os.path.join(tmp, "store1"))
        phase2(c, rank, n, os.path.join(tmp, "store2"))
    except Exception:  # noqa: BLE001
        c.fail.append(f"rank {rank}: exception:\n{traceback.format_exc()}")
    torch.save({"n": c.n, "fail": c.fail}, os.path.join(tmp, f"r{rank}.pt"))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(run, args=(n, tmp), nprocs=n)
        res = [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(n)]
    fails = [f for x in res for f in x["fail"]]
    for f in fails[:40]:
        print("FAIL:", f)
    print(f"{n} ranks: {sum(x['n'] for x in res)} checks against gloo, {len(fails)} failed")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
