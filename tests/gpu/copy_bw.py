#!/usr/bin/env python3
"""The card's copy bandwidth, the physical references of tests/gpu/run.sh:
D2D (bytes read plus written, as the issue counts it), H2D and D2H from and
to pinned host memory. PyTorch's CUDA copies, timed with CUDA events, the
median of 20 after 3 warm-ups, 256 MiB. --json FILE writes the numbers."""
import argparse
import json
import statistics

import torch


def timed(fn, reps=20, warm=3):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) / 1e3)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bytes", type=int, default=256 << 20)
    ap.add_argument("--json")
    n = ap.parse_args().bytes
    d1 = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
    d2 = torch.empty_like(d1)
    h = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    res = {
        "device": torch.cuda.get_device_name(0),
        "bytes": n,
        "d2d_GBps_read_plus_written": 2 * n / timed(lambda: d2.copy_(d1)) / 1e9,
        "h2d_GBps_pinned": n / timed(lambda: d1.copy_(h, non_blocking=True)) / 1e9,
        "d2h_GBps_pinned": n / timed(lambda: h.copy_(d1, non_blocking=True)) / 1e9,
    }
    assert torch.equal(d1, d2)
    for k, v in res.items():
        print(f"{k}: {v:.1f}" if isinstance(v, float) else f"{k}: {v}")
    if ap.parse_args().json:
        json.dump(res, open(ap.parse_args().json, "w"), indent=1)


if __name__ == "__main__":
    main()
