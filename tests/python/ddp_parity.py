"""DDP training of a small model with backend="gloo" and backend="hcomm":
the same seed and data must give bit-identical parameters.

    ddp_parity.py NRANKS [--steps N] [--dtype float32|float64|exact] [--rtol R]

float32/float64: an MLP on random data, SGD with momentum. At 2 ranks every
sum is a+b, the same in either order, so the parameters must match bit for
bit. At more ranks a float sum's rounding depends on the order of the
additions, and gloo's ring adds each chunk in another order than hcomm's
algorithms do: --rtol R then accepts a relative difference up to R (and
says how far apart they are). exact: float64, weights rounded to a 2^-10
grid after every step and data on a 2^-2 grid, so that every gradient and
every sum of gradients is exact and no order of addition can change a bit:
bit-identical at any number of ranks.
Exit 0: match, 1: mismatch, 77: torch or the backend unavailable.
"""
import argparse
import os
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    import torch.nn as nn
except ImportError as e:
    print(f"SKIP: torch unavailable: {e}")
    sys.exit(77)


def make_model(kind):
    torch.manual_seed(1234)
    dt = torch.float64 if kind in ("float64", "exact") else torch.float32
    if kind == "exact":
        m = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)).to(dt)
        grid(m)
    else:
        m = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8)).to(dt)
    return m, dt


def grid(m):
    with torch.no_grad():  # multiples of 2^-10
        for p in m.parameters():
            p.copy_(torch.round(p * 1024) / 1024)


def batch(kind, dt, rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    if kind == "exact":
        x = torch.randint(-4, 5, (4, 8), generator=g).to(dt) / 4
        y = torch.randint(-4, 5, (4, 4), generator=g).to(dt) / 4
    else:
        x = torch.randn(8, 16, generator=g, dtype=dt)
        y = torch.randn(8, 8, generator=g, dtype=dt)
    return x, y


def train(backend, rank, size, store, kind, steps):
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=size)
    model, dt = make_model(kind)
    # small buckets (the first one too): from the second step on (DDP rebuilds
    # its buckets then) two allreduces per step are in flight at once
    dist._DEFAULT_FIRST_BUCKET_BYTES = 512
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=512 / 2**20)
    exact = kind == "exact"
    opt = torch.optim.SGD(ddp.parameters(), lr=2.0 ** -6 if exact else 0.05,
                          momentum=0 if exact else 0.9)
    for step in range(steps):
        x, y = batch(kind, dt, rank, step)
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).sum() if exact else nn.functional.mse_loss(ddp(x), y)
        loss.backward()
        opt.step()
        if exact:
            grid(model)
    params = [p.detach().clone() for p in model.parameters()]
    del ddp, opt
    dist.destroy_process_group()
    return params


def worker(rank, size, tmp, kind, steps, out):
    torch.set_num_threads(1)
    import hcomm.torch  # noqa: F401  registers "hcomm"
    got = {}
    for i, backend in enumerate(("gloo", "hcomm")):
        got[backend] = train(backend, rank, size, os.path.join(tmp, f"store{i}"), kind, steps)
    same = all(torch.equal(a, b) for a, b in zip(got["gloo"], got["hcomm"]))
    diff = max(float((a - b).abs().max()) for a, b in zip(got["gloo"], got["hcomm"]))
    scale = max(float(a.abs().max()) for a in got["gloo"])
    init = [p.detach() for p in make_model(kind)[0].parameters()]
    moved = sum(int((a != b).sum()) for a, b in zip(init, got["hcomm"]))
    torch.save({"same": same, "rel": diff / scale, "moved": moved, "params": got},
               os.path.join(out, f"r{rank}.pt"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nranks", type=int)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "exact"])
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="accept a difference up to this times the largest parameter (0: bit-identical)")
    a = ap.parse_args()
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a.nranks, tmp, a.dtype, a.steps, tmp), nprocs=a.nranks)
        res = [torch.load(os.path.join(tmp, f"r{r}.pt")) for r in range(a.nranks)]
    ok = True
    # every rank of one backend holds the same parameters (DDP's contract)
    for r, x in enumerate(res):
        for be in ("gloo", "hcomm"):
            if not all(torch.equal(p, q) for p, q in zip(x["params"][be], res[0]["params"][be])):
                print(f"FAIL: rank {r}'s {be} parameters differ from rank 0's")
                ok = False
    rel = max(x["rel"] for x in res)
    same = all(x["same"] for x in res)
    n = sum(p.numel() for p in res[0]["params"]["hcomm"])
    moved = res[0]["moved"]
    if moved < n // 2:
        ok = False
        print(f"FAIL: training moved only {moved} of {n} parameters: the check would be vacuous")
    print(f"{a.nranks} ranks, {a.steps} steps, {a.dtype}, {n} parameters ({moved} trained away "
          "from their initial value): "
          f"{'bit-identical' if same else f'differ by up to {rel:.3g} of the largest'} "
          "(gloo vs hcomm)")
    if not same and rel > a.rtol:
        ok = False
        print(f"FAIL: not bit-identical" + (f", more than rtol {a.rtol}" if a.rtol else ""))
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
