#!/usr/bin/env python3
"""The peer of tests/gpu/run.sh's device allreduce: torch.distributed with
gloo on CUDA tensors (gloo stages them through host memory), 2 ranks on the
one GPU, float32, --bytes each; busbw = 2 (n-1)/n x bytes / time, the median
of 5 after 2 warm-ups. The result is checked (sum of rank+1)."""
import argparse
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, nbytes, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    n = nbytes // 4
    x = torch.full((n,), float(rank + 1), device="cuda")
    times = []
    for i in range(7):
        x.fill_(float(rank + 1))
        torch.cuda.synchronize()
        dist.barrier()
        t = time.perf_counter()
        dist.all_reduce(x)
        torch.cuda.synchronize()
        if i >= 2:
            times.append(time.perf_counter() - t)
    want = world * (world + 1) / 2
    ok = bool(torch.all(x == want))
    if rank == 0:
        t = statistics.median(times)
        busbw = 2 * (world - 1) / world * nbytes / t / 1e9
        print(f"gloo allreduce cuda {nbytes} B x {world} ranks: {t * 1e3:.2f} ms, "
              f"busbw {busbw:.2f} GB/s, check {'ok' if ok else 'WRONG'}")
    dist.destroy_process_group()
    if not ok:
        raise SystemExit(1)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=64 << 20)
    ap.add_argument("--ranks", type=int, default=2)
    a = ap.parse_args()
    mp.spawn(run, args=(a.ranks, a.bytes, 29500 + os.getpid() % 1000), nprocs=a.ranks)
