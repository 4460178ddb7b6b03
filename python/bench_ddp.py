#!/usr/bin/env python3
"""hcomm's torch.distributed backend against gloo's, on DDP (or FSDP)
training steps of CPU models, in one run.

    bench_ddp.py [-n RANKS] [--model 10m|100m] [--fsdp] [--rounds 5] [--steps 3]
                 [--warmup 1] [--json FILE] [--smoke]

Every rank holds both groups: the default group (gloo) and a group of the
whole world made with backend="hcomm", and the same model (an MLP of ~10M
or ~100M float32 parameters, batch 8) wrapped once for each. Each round
runs --steps timed steps on one backend, then on the other, the order
alternating from round to round, so both see the same machine state
(this machine: 2 cores, shared). Measured per step, as the slowest rank's
time (maxed over ranks through gloo, outside the timed region):

  step      forward, backward (with DDP's overlapped bucket allreduces, or
            FSDP's all-gathers and reduce-scatters) and the optimizer step
  compute   the same step without communication (DDP: no_sync(); FSDP: the
            same shapes on an unsharded local copy)
  comm      the step's communication alone, no compute: DDP: allreduces of
            the gradients in DDP's buckets (25 MiB), posted together and
            waited for; FSDP: each unit's all_gather_into_tensor then its
            reduce_scatter_tensor

Reported: medians over all timed steps, and hcomm/gloo ratios (< 1: hcomm
faster); the issue's goal is comm(hcomm) <= 0.5 x comm(gloo). --smoke: a
tiny model and one round (the ctest that shows the script runs).
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

# python/ (this script's directory) holds the package's sources, not its
# built extensions: import hcomm from where it was installed or built.
_here = os.path.dirname(os.path.abspath(__file__))
if not any(f.startswith("_hcomm") for f in os.listdir(os.path.join(_here, "hcomm"))):
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]

BUCKET = 25 * 2**20
WIDTHS = {"smoke": (16, [64, 64], 8), "10m": (16, [2048, 2048, 2048, 1024], 8),
          "100m": (1024, [4096] * 7, 1024)}


def make_model(kind):
    import torch.nn as nn
    import torch
    torch.manual_seed(0)
    inp, hidden, out = WIDTHS[kind]
    layers, prev = [], inp
    for h in hidden:
        layers += [nn.Linear(prev, h), nn.ReLU()]
        prev = h
    layers.append(nn.Linear(prev, out))
    return nn.Sequential(*layers)


def wrap(model, group, fsdp, n):
    import torch
    import torch.nn as nn
    if not fsdp:
        return nn.parallel.DistributedDataParallel(model, process_group=group, gradient_as_bucket_view=True)
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import fully_shard
    mesh = DeviceMesh.from_group(group, "cpu")
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    assert torch.distributed.get_world_size(group) == n
    return model


def comm_only(group, sizes, fsdp, n):
    """A step's communication alone: returns the function that runs it."""
    import torch
    import torch.distributed as dist
    if not fsdp:  # DDP's buckets: gradients in order, 25 MiB each
        buckets, cur = [], 0
        for s in reversed(sizes):
            if cur and (cur + s) * 4 > BUCKET:
                buckets.append(cur)
                cur = 0
            cur += s
        buckets.append(cur)
        bufs = [torch.ones(b) for b in buckets]

        def run():
            for w in [dist.all_reduce(b, group=group, async_op=True) for b in bufs]:
                w.wait()
        return run
    shards = [(s + n - 1) // n for s in sizes]
    ins = [torch.ones(s) for s in shards]
    fulls = [torch.empty(s * n) for s in shards]

    def run():
        for i, f in zip(ins, fulls):
            dist.all_gather_into_tensor(f, i, group=group)
        for i, f in zip(ins, fulls):
            dist.reduce_scatter_tensor(i, f, group=group)
    return run


def worker(rank, a, store, out):
    import torch
    import torch.distributed as dist
    import torch.nn as nn
    import hcomm.torch  # noqa: F401  registers "hcomm"

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=a.n)
    groups = {"gloo": dist.group.WORLD, "hcomm": dist.new_group(backend="hcomm")}
    ref = make_model(a.model)
    if a.fsdp:  # FSDP's units: one all-gather / reduce-scatter per Linear
        sizes = [sum(p.numel() for p in m.parameters()) for m in ref if isinstance(m, nn.Linear)]
    else:
        sizes = [p.numel() for p in ref.parameters()]
    nparams = sum(sizes)
    del ref
    models = {b: wrap(make_model(a.model), g, a.fsdp, a.n) for b, g in groups.items()}
    local = make_model(a.model) if a.fsdp else None  # compute only (FSDP)
    opts = {b: torch.optim.SGD(m.parameters(), lr=1e-3) for b, m in models.items()}
    lopt = torch.optim.SGD(local.parameters(), lr=1e-3) if a.fsdp else None
    comms = {b: comm_only(g, sizes, a.fsdp, a.n) for b, g in groups.items()}
    inp, _, outw = WIDTHS[a.model]
    x, y = torch.randn(8, inp), torch.randn(8, outw)

    def step(m, opt, sync=True):
        opt.zero_grad()
        if sync or a.fsdp:
            nn.functional.mse_loss(m(x), y).backward()
        else:
            with m.no_sync():
                nn.functional.mse_loss(m(x), y).backward()
        opt.step()

    kinds = {
        "step": lambda b: step(models[b], opts[b]),
        "compute": (lambda b: step(local, lopt)) if a.fsdp else (lambda b: step(models[b], opts[b], sync=False)),
        "comm": lambda b: comms[b](),
    }
    for b in groups:  # warm-up (DDP rebuilds its buckets after the first step)
        for _ in range(a.warmup + 1):
            for k in kinds.values():
                k(b)
    times = {b: {k: [] for k in kinds} for b in groups}
    for rnd in range(a.rounds):
        order = ("gloo", "hcomm") if rnd % 2 == 0 else ("hcomm", "gloo")
        for b in order:
            for kname, k in kinds.items():
                loc = []
                dist.barrier()
                for _ in range(a.steps):
                    t0 = time.perf_counter()
                    k(b)
                    loc.append(time.perf_counter() - t0)
                slowest = torch.tensor(loc, dtype=torch.float64)
                dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # gloo, untimed
                times[b][kname] += slowest.tolist()
    if rank == 0:
        with open(out, "w") as f:
            json.dump({"times": times, "nparams": nparams}, f)
    del models, opts
    dist.destroy_process_group(groups["hcomm"])
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--model", default="10m", choices=["10m", "100m"])
    ap.add_argument("--fsdp", action="store_true", help="fully_shard (FSDP2) instead of DDP")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3, help="timed steps per round, backend and kind")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--json", help="append the result as one JSON line here")
    ap.add_argument("--smoke", action="store_true", help="a tiny model, one round (does it run)")
    a = ap.parse_args()
    if a.smoke:
        a.model, a.rounds, a.steps, a.warmup = "smoke", 2, 1, 0
    try:
        import torch.multiprocessing as mp
        import hcomm.torch  # noqa: F401
    except ImportError as e:
        print(f"SKIP: torch or hcomm.torch unavailable: {e}")
        return 77
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "times.json")
        mp.spawn(worker, args=(a, os.path.join(tmp, "store"), out), nprocs=a.n)
        with open(out) as f:
            got = json.load(f)
    times = got["times"]
    what = "FSDP (fully_shard)" if a.fsdp else "DDP"
    print(f"{what}, {a.n} ranks, MLP of {got['nparams'] / 1e6:.1f}M float32 parameters, batch 8, "
          f"{a.rounds} interleaved rounds x {a.steps} steps (slowest rank's time, medians)")
    print(f"{'backend':8} {'step ms':>9} {'compute ms':>11} {'comm ms':>9}")
    res = {"ranks": a.n, "model": a.model, "fsdp": a.fsdp, "nparams": got["nparams"], "rounds": a.rounds,
           "steps": a.steps}
    for b in ("gloo", "hcomm"):
        med = {k: statistics.median(v) for k, v in times[b].items()}
        res[b] = {k + "_s": v for k, v in med.items()}
        print(f"{b:8} {med['step'] * 1e3:9.1f} {med['compute'] * 1e3:11.1f} {med['comm'] * 1e3:9.1f}")
    for k in ("step", "comm"):
        res[f"{k}_ratio_hcomm_over_gloo"] = res["hcomm"][k + "_s"] / res["gloo"][k + "_s"]
    print(f"hcomm/gloo: step {res['step_ratio_hcomm_over_gloo']:.2f}x, "
          f"comm {res['comm_ratio_hcomm_over_gloo']:.2f}x (goal: comm <= 0.5x)")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
