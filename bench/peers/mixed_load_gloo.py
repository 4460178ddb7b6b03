#!/usr/bin/python3
"""Peer baseline for hcomm's mixed_load on torch.distributed (gloo, CPU): the
same profile, the same step, the same JSON line as bench/peers/mixed_load_mpi.c.

    /usr/bin/python3 bench/peers/mixed_load_gloo.py --nproc 2 -p bench/profiles/mixed.txt
        [-N NAME] [-n STEPS] [-w WARMUP] [-a rank0|mean|min|max] [-c 0|1] [-l LIB]
        [-J FILE] [--port PORT]

Profile (bench/profiles/): one message class a line, "<collective> <bytes>
<count per step>" (allreduce allgather broadcast reduce_scatter alltoall; K/M/G
suffixes; '#' comments); bytes is the *_bw tools' size, as in mixed_load_mpi.c.
A step posts every message (its own buffers, its own offset into the
reference pattern) with async_op=True, float32 sum: all_reduce (in place, as
torch does and as mixed_load does), broadcast from rank 0, all_gather into a
list of views of one tensor, reduce_scatter, all_to_all_single; then waits
for every work. As hcomm's mixed_load: WARMUP steps (10), a checked step, a
barrier, STEPS steps (100) back to back with one clock read
(time.perf_counter) between steps, untimed checked steps (fresh inputs,
sentinel outputs) after every 25 timed steps and after the last. Each rank's
step times and its mean are reduced over the ranks by -a (max by default):
step_us_mean is the reduced mean, p50 = sorted[STEPS/2], p99 =
sorted[floor(0.99 STEPS)]; eff_GBps = bytes_per_step / step_us_mean.

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

CHECK_EVERY = 25  # as hcomm's mixed_load
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
            # every message: its own buffers, its own offset into the pattern
            m = {"coll": coll, "n": n, "eff": eff, "line": line, "first": len(msgs)}
            N = n * size
            if coll in ("allreduce", "broadcast"):  # in place
                m["buf"] = torch.empty(n)
            elif coll == "allgather":
                m["in"], m["out"] = torch.empty(n), torch.empty(N)
                m["outs"] = list(m["out"].split(n))
            elif coll == "reduce_scatter":
                m["in"], m["out"] = torch.empty(N), torch.empty(n)
                m["ins"] = list(m["in"].split(n))
            else:
                m["in"], m["out"] = torch.empty(N), torch.empty(N)
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

    def fill(m):  # fresh inputs, sentinels where the outputs go
        f = m["first"]
        if "buf" in m:
            m["buf"].copy_(vals(rank, f, m["n"]))
        else:
            m["in"].copy_(vals(rank, f, m["in"].numel()))
            m["out"].fill_(-1.0)

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

    tri = size * (size + 1) / 2

    def check(k, m):  # wrong elements of message k on this rank
        n, c, f = m["n"], m["coll"], m["first"]
        if c == "allreduce":
            want, got = vals(0, f, n) * tri, m["buf"]
        elif c == "broadcast":
            want, got = vals(0, f, n), m["buf"]
        elif c == "allgather":
            want, got = torch.cat([vals(r, f, n) for r in range(size)]), m["out"]
        elif c == "reduce_scatter":
            want, got = vals(0, f + rank * n, n) * tri, m["out"]
        else:
            want, got = torch.cat([vals(r, f + rank * n, n) for r in range(size)]), m["out"]
        w = int((got != want).sum())
        if "in" in m:  # out of place: the input must not change
            w += int((m["in"] != vals(rank, f, m["in"].numel())).sum())
        if w:
            print("%s: rank %d: message %d (%s %d bytes, profile line %d): %d wrong elements"
                  % (PROG, rank, k, c, m["eff"], m["line"], w), file=sys.stderr)
        return w

    def checked_step():  # untimed, on fresh inputs; wrong elements of every rank
        for m in msgs:
            fill(m)
        step()
        wt = torch.tensor([sum(check(k, m) for k, m in enumerate(msgs))], dtype=torch.int64)
        dist.all_reduce(wt)
        return int(wt.item())

    # as hcomm's mixed_load: warm-up, a checked step, a barrier, timed steps
    # back to back (one clock read between steps), checked steps after every
    # CHECK_EVERY timed ones and after the last, outside the timing
    for m in msgs:
        fill(m)
    for _ in range(a.warmup):
        step()
    wrong = checked_step() if a.check else 0
    dist.barrier()
    t = torch.zeros(a.steps + 1, dtype=torch.float64)
    t0 = time.perf_counter()
    for s in range(a.steps):
        step()
        t1 = time.perf_counter()
        t[s] = (t1 - t0) * 1e6
        if a.check and ((s + 1) % CHECK_EVERY == 0 or s == a.steps - 1):
            wrong += checked_step()
            t1 = time.perf_counter()
        t0 = t1
    # this rank's mean in the last slot; every slot reduced over the ranks (-a)
    t[a.steps] = t[:a.steps].sum() / a.steps
    if a.average == "rank0":
        dist.broadcast(t, 0)
    else:
        op = {"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN, "mean": dist.ReduceOp.SUM}
        dist.all_reduce(t, op=op[a.average])
        if a.average == "mean":
            t /= size

    if rank == 0:
        mean = float(t[a.steps])
        ts = sorted(t[:a.steps].tolist())
        bps = sum(m["eff"] for m in msgs)
        print("# %s (%s): profile %s: %d classes, %d messages, %d bytes per step, %d ranks, "
              "%d steps after %d warm-up, average %s"
              % (PROG, a.lib, pname, len(classes), len(msgs), bps, size, a.steps, a.warmup,
                 a.average), file=sys.stderr)
        row = {"tool": "mixed_load", "lib": a.lib, "profile": pname, "nranks": size,
               "steps": a.steps, "step_us_mean": round(mean, 3),
               "step_us_p50": round(ts[len(ts) // 2], 3),
               "step_us_p99": round(ts[int(len(ts) * 0.99)], 3),
               "bytes_per_step": bps, "eff_GBps": round(bps / mean / 1e3, 4),
               "wrong": wrong if a.check else None,
               "step_us_min": round(ts[0], 3), "step_us_max": round(ts[-1], 3),
               "messages_per_step": len(msgs), "warmup": a.warmup, "blocking": 0,
               "average": a.average, "mem": "torch", "profile_file": a.profile,
               "torch": torch.__version__}
        if skipped:
            row["skipped"] = skipped
            row["bytes_skipped_per_step"] = sum(s["bytes"] * s["count"] for s in skipped)
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
    ap.add_argument("-N", "--name", help="profile name in the JSON (default: the file's name "
                    "without .txt)")
    ap.add_argument("-n", "--steps", type=int, default=100)
    ap.add_argument("-w", "--warmup", type=int, default=10)
    ap.add_argument("-a", "--average", default="max",
                    help="rank0|mean|min|max or 0..3, as hcomm's tools (max)")
    ap.add_argument("-c", "--check", type=int, choices=(0, 1), default=1)
    ap.add_argument("-l", "--lib", default="gloo")
    ap.add_argument("-J", "--json", help="also append the JSON line to this file")
    ap.add_argument("--port", type=int, default=29518)
    a = ap.parse_args()
    names = ("rank0", "mean", "min", "max")
    if a.average in ("0", "1", "2", "3"):
        a.average = names[int(a.average)]
    if a.average not in names:
        die("-a wants rank0, mean, min or max (or 0..3), not '%s'" % a.average)
    if a.nproc < 1 or a.steps < 1 or a.warmup < 0:
        die("--nproc and -n want >= 1, -w >= 0")
    if a.json:
        try:
            open(a.json, "a").close()
        except OSError as e:
            die("%s: %s" % (a.json, e.strerror or e))
    classes = read_profile(a.profile, a.nproc)
    pname = a.name or os.path.basename(a.profile)
    if not a.name and len(pname) > 4 and pname.endswith(".txt"):
        pname = pname[:-4]  # as mixed_load names it
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
