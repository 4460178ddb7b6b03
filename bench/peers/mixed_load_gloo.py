#!/usr/bin/python3
"""Peer baseline for hcomm's mixed_load on torch.distributed (gloo, CPU): the
same profile, the same step, the same JSON line as bench/peers/mixed_load_mpi.c.

    /usr/bin/python3 bench/peers/mixed_load_gloo.py --nproc 2 -p bench/profiles/mixed.txt
        [-P NAME] [-n STEPS] [-w WARMUP] [-a max|mean|min|rank0] [-l LIB] [-J FILE]
        [--port PORT]

Profile: one message class a line, "<collective> <bytes> <count per step>"
(allreduce allgather broadcast reduce_scatter alltoall; K/M/G suffixes; '#'
comments); bytes is the nccl-tests size of the call, as in mixed_load_mpi.c.
A step posts every message with async_op=True (float32, sum; broadcast from
rank 0; alltoall as all_to_all_single; allgather into a list of views of one
tensor), then waits for every work. WARMUP untimed steps, a barrier, then
STEPS steps, each timed with time.perf_counter(); the step time is reduced
over the ranks (-a, the slowest rank by default); p50 = sorted[STEPS/2],
p99 = sorted[floor(0.99 STEPS)]; eff_GBps = bytes_per_step / mean step time.

torch's all_reduce and reduce_scatter reduce into their own buffers, so the
timed steps run on whatever the previous step left; afterwards the inputs are
written again and one more step is checked against the exact results.

A collective that this torch's gloo backend lacks (reduce_scatter in torch
1.13: "ProcessGroupGloo does not support reduce_scatter") is found by trying
it once, reported on stderr and skipped: the JSON line then has "skipped"
(the classes left out, with gloo's reason) and "bytes_skipped_per_step", and
bytes_per_step / eff_GBps count only what ran.

Spawns the ranks itself (torch.multiprocessing) on a loopback rendezvous.
Exit: 0, 1 when a result is wrong or a rank fails, 2 on a bad argument or
profile (or when every class is skipped).
"""
import argparse
import json
import os
import re
import sys
import time

COLLS = ("allreduce", "allgather", "broadcast", "reduce_scatter", "alltoall")
PROG = "mixed_load_gloo"


def die(msg):
    print("%s: %s" % (PROG, msg), file=sys.stderr)
    sys.exit(2)


def parse_size(s):
    m = re.fullmatch(r"(\d+)([KkMmGg]?)(B|iB)?", s)
    if not m:
        return None
    return int(m.group(1)) << {"": 0, "k": 10, "m": 20, "g": 30}[m.group(2).lower()]


def read_profile(path, nranks):
    """[(coll, bytes, eff_bytes, count, per_step, line)]; exits 2 on errors."""
    try:
        with open(path) as f:
            lines = f.readlines()
    except OSError as e:
        die("%s: %s" % (path, e.strerror or e))
    out = []
    for no, line in enumerate(lines, 1):
        f = line.split("#", 1)[0].split()
        if not f:
            continue
        if len(f) != 3:
            die('%s:%d: want "<collective> <bytes> <count per step>"' % (path, no))
        coll, bs, cs = f
        if coll not in COLLS:
            die("%s:%d: unknown collective '%s' (%s)" % (path, no, coll, " ".join(COLLS)))
        b = parse_size(bs)
        if not b:
            die("%s:%d: bad size '%s'" % (path, no, bs))
        if not re.fullmatch(r"\d+", cs) or not 1 <= int(cs) <= 100000:
            die("%s:%d: bad count per step '%s' (1..100000)" % (path, no, cs))
        if coll in ("allreduce", "broadcast"):
            count = b // 4
            eff = count * 4
        else:
            count = b // 4 // nranks  # per rank
            eff = count * 4 * nranks
        if count == 0:
            die("%s:%d: %s of %d bytes is less than one float32 per rank (%d ranks)"
                % (path, no, coll, b, nranks))
        if eff != b:
            print("%s: %s:%d: %s %d bytes rounded down to %d (a multiple of 4 * %d ranks)"
                  % (PROG, path, no, coll, b, eff, nranks), file=sys.stderr)
        out.append((coll, b, eff, count, int(cs), no))
    if not out:
        die("%s: no message classes" % path)
    return out


def worker(rank, size, a, classes, pname):
    import torch
    import torch.distributed as dist

    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=size)
    f32 = torch.float32

    def vals(r, first, n):  # what rank r contributes at elements first..first+n
        return ((torch.arange(first, first + n, dtype=torch.int64) % 7 + 1) * (r + 1)).to(f32)

    # Which collectives does this gloo have? Tried once, on every rank alike
    # (gloo refuses before it communicates, so no rank is left waiting).
    missing = {}
    try:
        dist.reduce_scatter(torch.empty(1), [torch.ones(1) for _ in range(size)],
                            async_op=True).wait()
    except (RuntimeError, AttributeError) as e:
        missing["reduce_scatter"] = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)

    msgs, skipped = [], []
    for coll, b, eff, n, per_step, line in classes:
        if coll in missing:
            skipped.append({"collective": coll, "bytes": eff, "count": per_step, "line": line,
                            "reason": missing[coll]})
            continue
        for _ in range(per_step):
            N = n * size
            if coll == "allreduce":
                m = {"buf": vals(rank, 0, n)}
            elif coll == "broadcast":
                m = {"buf": vals(rank, 0, n)}
            elif coll == "allgather":
                out = torch.full((N,), -1.0)
                m = {"in": vals(rank, 0, n), "out": out, "outs": list(out.split(n))}
            elif coll == "reduce_scatter":
                m = {"out": torch.full((n,), -1.0), "ins": list(vals(rank, 0, N).split(n))}
            else:
                m = {"in": vals(rank, 0, N), "out": torch.full((N,), -1.0)}
            m.update(coll=coll, n=n, bytes=b, eff=eff, line=line)
            msgs.append(m)
    if rank == 0:
        for s in skipped:
            print("%s: gloo (torch %s) lacks %s: skipped %d x %d bytes per step (profile "
                  "line %d): %s" % (PROG, torch.__version__, s["collective"], s["count"],
                                    s["bytes"], s["line"], s["reason"]), file=sys.stderr)
    if not msgs:
        if rank == 0:
            print("%s: every class of the profile is skipped: nothing to run" % PROG,
                  file=sys.stderr)
        dist.destroy_process_group()
        return 2

    def post(m):
        c = m["coll"]
        if c == "allreduce":
            return dist.all_reduce(m["buf"], async_op=True)
        if c == "broadcast":
            return dist.broadcast(m["buf"], 0, async_op=True)
        if c == "allgather":
            return dist.all_gather(m["outs"], m["in"], async_op=True)
        if c == "reduce_scatter":
            return dist.reduce_scatter(m["out"], m["ins"], async_op=True)
        return dist.all_to_all_single(m["out"], m["in"], async_op=True)

    def step():
        works = [post(m) for m in msgs]
        for w in works:
            w.wait()

    t = torch.zeros(a.steps, dtype=torch.float64)
    for s in range(-a.warmup, a.steps):
        if s == 0:
            dist.barrier()
        t0 = time.perf_counter()
        step()
        if s >= 0:
            t[s] = (time.perf_counter() - t0) * 1e6
    if a.average == "rank0":
        dist.broadcast(t, 0)
    else:
        op = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "mean": dist.ReduceOp.SUM}
        dist.all_reduce(t, op=op[a.average])
        if a.average == "mean":
            t /= size

    # the checked step: inputs again, outputs poisoned
    for m in msgs:
        if m["coll"] in ("allreduce", "broadcast"):
            m["buf"].copy_(vals(rank, 0, m["n"]))
        elif "out" in m:
            m["out"].fill_(-1.0)
    step()
    tri = size * (size + 1) / 2
    wrong = 0
    for m in msgs:
        n, c = m["n"], m["coll"]
        if c == "allreduce":
            want = vals(0, 0, n) * tri
            got = m["buf"]
        elif c == "broadcast":
            want, got = vals(0, 0, n), m["buf"]
        elif c == "allgather":
            want, got = torch.cat([vals(r, 0, n) for r in range(size)]), m["out"]
        elif c == "reduce_scatter":
            want, got = vals(0, rank * n, n) * tri, m["out"]
        else:
            want, got = torch.cat([vals(r, rank * n, n) for r in range(size)]), m["out"]
        w = int((got != want).sum())
        if w:
            print("%s: rank %d: %s %d bytes (profile line %d): %d wrong elements"
                  % (PROG, rank, c, m["bytes"], m["line"], w), file=sys.stderr)
        wrong += w
    wt = torch.tensor([wrong], dtype=torch.int64)
    dist.all_reduce(wt)
    wrong = int(wt.item())

    if rank == 0:
        ts = sorted(t.tolist())
        mean = sum(ts) / len(ts)
        bps = sum(m["eff"] for m in msgs)
        skipped_bytes = sum(s["bytes"] * s["count"] for s in skipped)
        print("# %s (%s): profile %s: %d classes, %d messages, %d bytes per step, %d ranks, "
              "%d steps after %d warm-up, step time over ranks: %s"
              % (PROG, a.lib, pname, len(classes), len(msgs), bps, size, a.steps, a.warmup,
                 a.average), file=sys.stderr)
        row = {"tool": "mixed_load", "lib": a.lib, "profile": pname, "nranks": size,
               "steps": a.steps, "warmup": a.warmup,
               "step_us_mean": round(mean, 3), "step_us_p50": round(ts[len(ts) // 2], 3),
               "step_us_p99": round(ts[int(len(ts) * 0.99)], 3),
               "step_us_min": round(ts[0], 3), "step_us_max": round(ts[-1], 3),
               "bytes_per_step": bps, "messages_per_step": len(msgs),
               "eff_GBps": round(bps / mean / 1e3, 4), "dtype": "float32", "op": "sum",
               "average": a.average, "torch": torch.__version__, "wrong": wrong}
        if skipped:
            row["skipped"] = skipped
            row["bytes_skipped_per_step"] = skipped_bytes
        line = json.dumps(row, separators=(",", ":"))
        print(line, flush=True)
        if a.json:
            with open(a.json, "a") as f:
                f.write(line + "\n")
    dist.destroy_process_group()
    return 1 if wrong else 0


def run(rank, size, a, classes, pname, status):
    rc = worker(rank, size, a, classes, pname)
    if rank == 0:
        status.value = rc


def main():
    ap = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("-p", "--profile", required=True)
    ap.add_argument("-P", "--name", help="profile name in the JSON (default: file stem)")
    ap.add_argument("-n", "--steps", type=int, default=100)
    ap.add_argument("-w", "--warmup", type=int, default=10)
    ap.add_argument("-a", "--average", choices=("max", "mean", "min", "rank0"), default="max")
    ap.add_argument("-l", "--lib", default="gloo")
    ap.add_argument("-J", "--json", help="also append the JSON line to this file")
    ap.add_argument("--port", type=int, default=29518)
    a = ap.parse_args()
    if a.nproc < 1 or a.steps < 1 or a.warmup < 0:
        die("--nproc and -n want >= 1, -w >= 0")
    if a.json:
        try:
            open(a.json, "a").close()
        except OSError as e:
            die("%s: %s" % (a.json, e.strerror or e))
    classes = read_profile(a.profile, a.nproc)
    pname = a.name or os.path.splitext(os.path.basename(a.profile))[0]
    try:
        import torch.multiprocessing as mp
    except ImportError:
        print("%s: torch is missing (apt-get install -y python3-torch)" % PROG, file=sys.stderr)
        return 1
    ctx = mp.get_context("spawn")
    status = ctx.Value("i", 1)
    try:
        mp.spawn(run, args=(a.nproc, a, classes, pname, status), nprocs=a.nproc, join=True)
    except Exception as e:  # a rank failed: its traceback is above
        print("%s: a rank failed: %s" % (PROG, str(e).strip().splitlines()[0] if str(e).strip()
                                         else type(e).__name__), file=sys.stderr)
        return 1
    return status.value


if __name__ == "__main__":
    sys.exit(main())
