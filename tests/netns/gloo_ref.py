"""gloo (torch.distributed, CPU) reference for bench_tcp.sh: a float32 sum
allreduce of BYTES, ranks launched by hand (one per network namespace) with
RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and GLOO_SOCKET_IFNAME set.
Prints the nccl-tests columns of bench/peers/gloo_bench.py for one size.
"""
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    nbytes = int(sys.argv[1]) if len(sys.argv) > 1 else 32 << 20
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 20
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    count = nbytes // 4
    base = (torch.arange(count, dtype=torch.int64) % 7 + 1).to(torch.float32)
    t = base * (rank + 1)
    for _ in range(iters // 10 + 1):
        dist.all_reduce(t)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(t)
    us = torch.tensor([(time.perf_counter() - t0) * 1e6 / iters], dtype=torch.float64)
    dist.all_reduce(us, op=dist.ReduceOp.MAX)
    t.copy_(base * (rank + 1))
    dist.all_reduce(t)
    wrong = torch.tensor([int((t != base * (size * (size + 1) / 2)).sum())])
    dist.all_reduce(wrong)
    if rank == 0:
        algbw = nbytes / us.item() / 1e3
        print("# %12s %12s %6s %6s %10s %10s %10s %6s" % (
            "size", "count", "type", "redop", "time_us", "algbw", "busbw", "wrong"))
        print("  %12d %12d %6s %6s %10.2f %10.3f %10.3f %6d" % (
            nbytes, count, "float", "sum", us.item(), algbw,
            algbw * 2.0 * (size - 1) / size, wrong.item()), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
