#!/usr/bin/env python3
"""hcomm's torch.distributed backend against gloo's on DDP-sized allreduces.

    bench_ddp.py [-n RANKS] [--mib 25 | --bytes N] [--buckets 1] [--rounds 10]
                 [--iters 5] [--warmup 2] [--json FILE]

Every rank holds both groups at once: the default group (gloo) and a group
of the whole world made with backend="hcomm". Each round times --iters
allreduces (SUM, float32, --mib MiB each, DDP's default bucket) on one
backend, then on the other, the order alternating from round to round, so
both see the same machine state; --buckets B posts B buckets async and
waits for all (DDP's overlapped buckets). An allreduce's time is the
slowest rank's (the times are maxed over ranks through gloo, outside the
timed region). Reported: the median over every timed allreduce, p10/p90,
algorithm and bus bandwidth (busbw = 2 (n-1)/n x bytes / time, nccl-tests'
convention), and the ratio gloo/hcomm (> 1: hcomm faster). The results are
checked after the warm-up. Ranks are torch.multiprocessing processes on
this host.
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


def worker(rank, a, store, out):
    import torch
    import torch.distributed as dist
    import hcomm.torch  # noqa: F401  registers "hcomm"

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="file://" + store, rank=rank, world_size=a.n)
    groups = {"gloo": dist.group.WORLD, "hcomm": dist.new_group(backend="hcomm")}
    elems = a.bytes // 4
    bufs = [torch.full((elems,), float(rank + 1)) for _ in range(a.buckets)]
    want = a.n * (a.n + 1) / 2

    def step(g):
        works = [dist.all_reduce(b, group=g, async_op=True) for b in bufs]
        for w in works:
            w.wait()

    for name, g in groups.items():  # warm-up, then a correctness check
        for _ in range(a.warmup):
            step(g)
        for b in bufs:
            b.fill_(rank + 1)
        step(g)
        if not all(bool((b == want).all()) for b in bufs):
            raise SystemExit(f"rank {rank}: {name}: wrong allreduce result")
    times = {"gloo": [], "hcomm": []}
    for rnd in range(a.rounds):
        order = ("gloo", "hcomm") if rnd % 2 == 0 else ("hcomm", "gloo")
        for name in order:
            g = groups[name]
            local = []
            dist.barrier()
            for _ in range(a.iters):
                t0 = time.perf_counter()
                step(g)
                local.append(time.perf_counter() - t0)
            slowest = torch.tensor(local, dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)  # gloo, untimed
            times[name] += slowest.tolist()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(times, f)
    dist.destroy_process_group(groups["hcomm"])
    dist.destroy_process_group()


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * (len(xs) - 1) + 0.5))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[1])
    ap.add_argument("-n", type=int, default=2, help="ranks (default 2)")
    ap.add_argument("--mib", type=float, default=25, help="MiB per bucket (default 25)")
    ap.add_argument("--bytes", type=int, help="bytes per bucket (instead of --mib)")
    ap.add_argument("--buckets", type=int, default=1, help="buckets in flight (default 1)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--iters", type=int, default=5, help="allreduces timed per round and backend")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--json", help="append the result as one JSON line here")
    a = ap.parse_args()
    if a.bytes is None:
        a.bytes = int(a.mib * 2**20)
    a.bytes = max(4, a.bytes // 4 * 4)
    size = f"{a.bytes / 2**20:g} MiB" if a.bytes >= 2**20 else f"{a.bytes} B"
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
            times = json.load(f)
    nbytes = a.bytes * a.buckets
    res = {"ranks": a.n, "bytes": a.bytes, "buckets": a.buckets, "rounds": a.rounds, "iters": a.iters}
    print(f"allreduce SUM float32, {a.n} ranks, {a.buckets} x {size}, "
          f"{a.rounds} interleaved rounds x {a.iters} (slowest rank's time)")
    print(f"{'backend':8} {'median ms':>10} {'p10 ms':>8} {'p90 ms':>8} {'algbw GB/s':>11} {'busbw GB/s':>11}")
    for name in ("gloo", "hcomm"):
        xs = times[name]
        med = statistics.median(xs)
        alg = nbytes / med / 1e9
        bus = alg * 2 * (a.n - 1) / a.n
        res[name] = {"median_s": med, "p10_s": pct(xs, 0.1), "p90_s": pct(xs, 0.9),
                     "algbw_GBps": alg, "busbw_GBps": bus, "samples": len(xs)}
        print(f"{name:8} {med * 1e3:10.3f} {pct(xs, 0.1) * 1e3:8.3f} {pct(xs, 0.9) * 1e3:8.3f} "
              f"{alg:11.3f} {bus:11.3f}")
    res["ratio_gloo_over_hcomm"] = res["gloo"]["median_s"] / res["hcomm"]["median_s"]
    print(f"ratio gloo/hcomm (median time): {res['ratio_gloo_over_hcomm']:.2f}x "
          f"({'hcomm faster' if res['ratio_gloo_over_hcomm'] > 1 else 'gloo faster'})")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(res) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
