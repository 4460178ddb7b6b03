"""FSDP training with backend="gloo" and backend="hcomm": the same model,
seed and data must train to the same losses and parameters.

    fsdp_parity.py NRANKS [--steps N] [--rtol R] [--api fully_shard|fsdp1]

fully_shard (FSDP2, torch.distributed.fsdp.fully_shard) on a CPU
DeviceMesh of every rank, each Linear a unit of its own; --api fsdp1: the
FullyShardedDataParallel wrapper with device_id=cpu. FSDP's collectives are
all_gather_into_tensor and reduce_scatter_tensor (coalesced where torch
coalesces them); with values in float32 the reduce-scatter's sums at more
than 2 ranks depend on the order of addition, so losses and parameters are
compared within --rtol (2 ranks: bit-identical).
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


def make_model():
    torch.manual_seed(4321)
    return nn.Sequential(nn.Linear(32, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 8))


def train(backend, rank, size, store, steps, api):
    dist.init_process_group(backend, init_method="file://" + store, rank=rank, world_size=size)
    model = make_model()
    if api == "fully_shard":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        mesh = init_device_mesh("cpu", (size,))
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        wrapped = model
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        wrapped = FSDP(model, device_id=torch.device("cpu"), use_orig_params=True)
    opt = torch.optim.SGD(wrapped.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for step in range(steps):
        g = torch.Generator().manual_seed(1000 * step + rank)
        x, y = torch.randn(16, 32, generator=g), torch.randn(16, 8, generator=g)
        opt.zero_grad()
        loss = nn.functional.mse_loss(wrapped(x), y)
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t)
        losses.append(float(t) / size)
    if api == "fully_shard":
        params = [p.full_tensor().detach().clone() for p in model.parameters()]
    else:
        from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
        with FSDP.summon_full_params(wrapped):
            params = [p.detach().clone() for p in wrapped.parameters()]
    del wrapped, opt
    dist.destroy_process_group()
    return losses, params


def worker(rank, size, tmp, steps, api):
    torch.set_num_threads(1)
    import hcomm.torch  # noqa: F401
    got = {be: train(be, rank, size, os.path.join(tmp, f"store_{be}"), steps, api) for be in ("gloo", "hcomm")}
    torch.save(got, os.path.join(tmp, f"r{rank}.pt"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("nranks", type=int)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--api", default="fully_shard", choices=["fully_shard", "fsdp1"])
    a = ap.parse_args()
    try:
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: hcomm.torch unavailable: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(worker, args=(a.nranks, tmp, a.steps, a.api), nprocs=a.nranks)
        res = torch.load(os.path.join(tmp, "r0.pt"))
    (lg, pg), (lh, ph) = res["gloo"], res["hcomm"]
    tol = 0.0 if a.nranks == 2 else a.rtol
    ldiff = max(abs(x - y) / max(abs(x), 1e-12) for x, y in zip(lg, lh))
    pdiff = max(float((p - q).abs().max()) for p, q in zip(pg, ph)) / max(float(p.abs().max()) for p in pg)
    init = list(make_model().parameters())
    moved = sum(int((p != q).sum()) for p, q in zip(init, ph))
    n = sum(p.numel() for p in ph)
    print(f"{a.api}, {a.nranks} ranks, {a.steps} steps, {n} parameters ({moved} moved): loss gloo "
          f"{lg[0]:.6f} -> {lg[-1]:.6f}, hcomm {lh[0]:.6f} -> {lh[-1]:.6f}; largest relative difference: "
          f"losses {ldiff:.3g}, parameters {pdiff:.3g} (allowed {tol:g})")
    ok = ldiff <= tol and pdiff <= tol and moved >= n // 2 and lh[-1] < lh[0]
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
