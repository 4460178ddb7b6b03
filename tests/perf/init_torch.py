#!/usr/bin/env python3
"""init_torch.py: torch.distributed's rendezvous and gloo's init by job size
on this machine, beside hcomm_init (tests/perf/init_scale.sh; docs/bootstrap.md,
"Init time by job size"). Not a ctest test: the numbers are timings.

    python3 tests/perf/init_torch.py [--sizes "2 8 32"] [--reps 3] [--server-first]

Run it with the python of a torch venv (scripts/python-venv.sh). Per size
and run it starts N processes that import torch first (not timed), then wait
together for a start file, so that what is timed is the rendezvous alone, as
init_scale.sh times hcomm_init alone:

  store   a TCPStore (rank 0 the server, world_size N, every client
          connected: wait_for_workers) and a barrier through it (every rank
          adds to a counter, the last sets a key the others wait for), what
          init_process_group's store rendezvous does;
  gloo    init_process_group("gloo") on that store, which also connects
          every pair of ranks (gloo's full mesh), then a barrier.

--server-first: rank 0 starts the store's server before the start file (as
torchrun's agent holds it before its workers start); the clients then
connect at once instead of retrying with back-off while rank 0 starts it.

Each rank prints its two times; the median run (by rank 0's gloo time) is
printed as one markdown row: rank 0's and the slowest rank's store and gloo
times, in ms.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

CHILD = r"""
import os, sys, time
import torch.distributed as dist
from datetime import timedelta
rank, n, port, go, first = (int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4],
                            sys.argv[5] == "1")
store = None
if first and rank == 0:  # the server up before the others start, as torchrun's agent's
    store = dist.TCPStore("127.0.0.1", port, n, True, timeout=timedelta(seconds=300),
                          wait_for_workers=False)
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
t0 = time.monotonic()
if store is None:
    store = dist.TCPStore("127.0.0.1", port, n, rank == 0, timeout=timedelta(seconds=300),
                          wait_for_workers=not first)
if store.add("arrived", 1) == n:
    store.set("all arrived", "1")
store.wait(["all arrived"])
t1 = time.monotonic()
dist.init_process_group("gloo", store=dist.PrefixStore("pg", store), rank=rank, world_size=n,
                        timeout=timedelta(seconds=300))
dist.barrier()
t2 = time.monotonic()
print("times %d %.3f %.3f" % (rank, (t1 - t0) * 1e3, (t2 - t0) * 1e3), flush=True)
dist.destroy_process_group()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(n, tmp, first):
    go = os.path.join(tmp, "go")
    if os.path.exists(go):
        os.unlink(go)
    port = free_port()
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(r), str(n), str(port), go,
                               "1" if first else "0"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(n)]
    for p in procs:  # every rank has imported torch
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise SystemExit("a rank did not start: %r %s" % (line, p.stdout.read()[-2000:]))
    open(go, "w").close()
    times = {}
    for p in procs:
        out = p.stdout.read()
        p.wait(timeout=600)
        for line in out.splitlines():
            if line.startswith("times "):
                _, r, st, gl = line.split()
                times[int(r)] = (float(st), float(gl))
        if p.returncode != 0:
            raise SystemExit("a rank failed (rc %d): %s" % (p.returncode, out[-2000:]))
    return times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="2 8 32")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--server-first", action="store_true",
                    help="rank 0 starts the TCPStore server before the start file")
    a = ap.parse_args()
    import torch
    print("%s, %d cores, torch %s, load %s" % (time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                                               os.cpu_count(), torch.__version__,
                                               " ".join(open("/proc/loadavg").read().split()[:3])))
    print()
    print("| ranks | rank 0 store ms | slowest store ms | rank 0 gloo ms | slowest gloo ms |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for n in [int(x) for x in a.sizes.split()]:
            runs = [one_run(n, tmp, a.server_first) for _ in range(a.reps)]
            runs.sort(key=lambda t: t[0][1])
            t = runs[len(runs) // 2]
            print("| %d | %.1f | %.1f | %.1f | %.1f |" % (
                n, t[0][0], max(v[0] for v in t.values()), t[0][1],
                max(v[1] for v in t.values())), flush=True)


if __name__ == "__main__":
    main()
