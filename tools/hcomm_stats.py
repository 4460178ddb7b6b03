#!/usr/bin/python3
"""hcomm_stats: merges the ranks' HCOMM_STATS_FILE reports into one job report.

usage: hcomm_stats [--json] [--top N] FILE|DIR ...

Each rank writes JSON lines (HCOMM_STATS=1 or 2, HCOMM_STATS_FILE with %r);
every report a rank writes (hcomm_stats_dump, finalize) is numbered, and the
last one of each rank is merged. The report shows:
  - the operations by total time across ranks, with their share;
  - per operation, the rank with the least time inside it: in a collective
    every rank leaves together, so the rank that spends least inside arrived
    last and the others waited for it (the straggler); with level 2 the time
    blocked in waits says the same more directly;
  - the busiest peer pairs and node links (level 2), by bytes sent;
  - device memory (ranks with a GPU backend): the staging's copies each way
    per byte of the job, its calls and its pinned buffers, summed over the
    ranks ("gpu" in --json: each counter of the ranks' "gpu" records summed).
A rank is marked [straggler] when both hold, for its time inside (level 2:
its time blocked) against the median over the ranks:
  - it is below 0.8 x the median (the others waited clearly longer), and
  - the gap per call, (median - its time) / calls, is over 50 us: a rank
    that waits a few microseconds less per call is one message latency or
    one scheduler wake-up ahead, not late; a rank the others really wait
    for costs them milliseconds per call.
Rooted operations and send/recv are marked asymmetric instead. With --json
each operation has "gap_per_call_us" and "straggler" (the rank or null).
Files of a DIR (or a glob) whose first line is no statistics record (logs,
scripts) are skipped with a note on stderr; a FILE named alone must be one.
Exit status: 0, 2 for bad usage or files with no report (docs/observability.md).
"""
import glob
import json
import os
import statistics
import sys

# The straggler rule (see the usage text): relative and absolute. The
# relative part alone flags noise on fast operations: a barrier at 6.7 us
# against a median of 9.3 us is below 0.8 x but only 2.6 us apart (with 2
# ranks the median is the midpoint: 5 us against 9.3 us). Per call, because
# time_s is summed over the calls: a floor on the total would stop filtering
# on a long run (10^5 barriers 2 us apart add up to 0.2 s) while the gap
# that matters, what each call makes the others wait, stays 2 us. 50 us is
# above what comes from the algorithm and the host rather than from a late
# rank: a message's latency on shm (~1 us) and on tcp over loopback or a LAN
# (10-50 us), a thread's wake-up on a busy core (tens of us); a rank that is
# really late (imbalanced work, a slow node, GC, I/O) costs milliseconds per
# call, and the 20 ms sleep of tests/core/mp_stats.c is 400 times the floor.
STRAGGLER_RATIO = 0.8
STRAGGLER_FLOOR_US = 50.0


def die(msg):
    print("hcomm_stats: " + msg, file=sys.stderr)
    sys.exit(2)


def is_report(rec):
    return isinstance(rec, dict) and "rank" in rec and "type" in rec


def first_record(lines):
    """The first non-empty line as a statistics record, or None."""
    for line in lines:
        if line.strip():
            try:
                rec = json.loads(line)
            except ValueError:
                return None
            return rec if is_report(rec) else None
    return None


def read_files(paths):
    files = []  # (path, named: given by name rather than found in a folder or glob)
    for p in paths:
        if os.path.isdir(p):
            files += [(f, False) for f in sorted(glob.glob(os.path.join(p, "*")))]
        elif any(c in p for c in "*?["):
            files += [(f, False) for f in sorted(glob.glob(p))]
        else:
            files.append((p, True))
    if not files:
        die("no files given or matched")
    ranks = {}  # rank -> {report number -> [records]}
    for f, named in files:
        if not named and not os.path.isfile(f):
            continue
        try:
            with open(f, errors="replace") as fh:
                lines = fh.readlines()
        except OSError as e:
            die("%s: %s" % (f, e.strerror))
        # A folder may hold other files (logs, a job script): a file found
        # there whose first line is no statistics record is skipped, with a
        # note; a file given by name must be a report.
        if not named and first_record(lines) is None:
            print("hcomm_stats: skipping %s: not a statistics report (JSON lines)" % f,
                  file=sys.stderr)
            continue
        for n, line in enumerate(lines, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError as e:
                die("%s:%d: not a JSON line (%s)" % (f, n, getattr(e, "msg", e)))
            if not is_report(rec):
                die("%s:%d: not an hcomm statistics record" % (f, n))
            ranks.setdefault(rec["rank"], {}).setdefault(rec.get("report", 0), []).append(rec)
    if not ranks:
        die("no statistics records in " + ", ".join(f for f, _ in files))
    job = {}
    for r, reps in ranks.items():
        last = max(reps)
        recs = reps[last]
        info = next((x for x in recs if x["type"] == "rank"), None)
        if info is None:
            die("rank %d: report %d has no rank record" % (r, last))
        job[r] = {"info": info, "recs": recs}
    return job


def fmt_s(s):
    if s >= 1:
        return "%.3f s" % s
    if s >= 1e-3:
        return "%.3f ms" % (s * 1e3)
    return "%.1f us" % (s * 1e6)


def fmt_b(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k:
            return "%.1f %s" % (b / k, unit)
    return "%d B" % b


def merge(job, top):
    ranks = sorted(job)
    size = job[ranks[0]]["info"]["size"]
    out = {"size": size, "ranks": ranks, "missing": [r for r in range(size) if r not in job]}
    ops = {}
    for r in ranks:
        for rec in job[r]["recs"]:
            if rec["type"] == "op":
                ops.setdefault(rec["op"], {})[r] = rec
    total = sum(rec["time_s"] for per in ops.values() for rec in per.values())
    oplist = []
    for name, per in ops.items():
        t = sum(x["time_s"] for x in per.values())
        calls = sum(x["calls"] for x in per.values())
        entry = {"op": name, "time_s": t, "share": t / total if total > 0 else 0.0,
                 "calls": calls, "bytes": sum(x["bytes"] for x in per.values()),
                 "mean_us": t / calls * 1e6 if calls else 0.0,
                 "p99_us_max": max(x["p99_us"] for x in per.values()),
                 "p99_rank": max(per, key=lambda q: per[q]["p99_us"]),
                 "ranks": len(per)}
        # the straggler: least time inside (or least time blocked, level 2)
        key = "wait_s" if all("wait_s" in x for x in per.values()) else "time_s"
        # ranks that timed no call of it (level 1 samples small calls) say nothing
        vals = {q: x[key] for q, x in per.items() if x.get("timed", 1) > 0}
        if len(vals) >= 2:
            med = statistics.median(vals.values())
            last = min(vals, key=vals.get)
            most = max(vals, key=vals.get)
            # time_s (and wait_s) cover all calls (level 1 scales the sampled
            # ones up): the gap per call is over the calls of those ranks
            ncalls = statistics.median(per[q]["calls"] for q in vals) or 1
            gap_us = (med - vals[last]) / ncalls * 1e6
            entry.update({"by": key, "median_s": med, "last_to_arrive": last,
                          "last_s": vals[last], "most_waiting": most, "most_s": vals[most],
                          "gap_per_call_us": gap_us})
            # a real straggler: it spent clearly less time inside than the
            # rest, and by more than noise per call (STRAGGLER_FLOOR_US)
            entry["straggler"] = (last if med > 0 and vals[last] < STRAGGLER_RATIO * med
                                  and gap_us > STRAGGLER_FLOOR_US else None)
            # a root (broadcast, reduce) or a sender blocks least by design
            entry["asymmetric"] = name in ("broadcast", "reduce", "send", "recv")
        oplist.append(entry)
    oplist.sort(key=lambda e: -e["time_s"])
    out["ops"] = oplist
    # peers and links (level 2)
    pairs = {}
    node_of = {}
    for r in ranks:
        nodes = job[r]["info"].get("nodes")
        if nodes:
            node_of = {q: n for q, n in enumerate(nodes)}
            break
    names = {}
    for r in ranks:
        info = job[r]["info"]
        names[info.get("node", 0)] = info.get("node_id") or info.get("host", "?")
    for r in ranks:
        for rec in job[r]["recs"]:
            if rec["type"] == "peer" and rec.get("tx_bytes", 0) > 0:
                pairs[(r, rec["peer"])] = (rec["tx_bytes"], rec["tx_msgs"], rec["driver"])
    plist = sorted(pairs.items(), key=lambda kv: -kv[1][0])
    out["pairs"] = [{"from": a, "to": b, "bytes": v[0], "msgs": v[1], "driver": v[2]}
                    for (a, b), v in plist[:top]]
    links = {}
    for (a, b), (byt, msgs, drv) in pairs.items():
        na, nb = node_of.get(a, -1), node_of.get(b, -1)
        k = (min(na, nb), max(na, nb), drv)
        links[k] = links.get(k, 0) + byt
    out["links"] = [{"nodes": [names.get(k[0], str(k[0])), names.get(k[1], str(k[1]))],
                     "driver": k[2], "bytes": v}
                    for k, v in sorted(links.items(), key=lambda kv: -kv[1])[:top]]
    out["gpu"] = merge_gpu(job, ranks)
    return out


def merge_gpu(job, ranks):
    """The ranks' "gpu" records summed (counters only), with the ranks that
    wrote one; {} when none did."""
    total = {}
    for r in ranks:
        for rec in job[r]["recs"]:
            if rec["type"] != "gpu":
                continue
            total.setdefault("ranks", []).append(r)
            for k, v in rec.items():
                if k not in ("type", "report", "rank") and isinstance(v, int):
                    total[k] = total.get(k, 0) + v
    return total


def print_gpu(g):
    print("\ndevice memory (%d ranks with a GPU backend, all together):" % len(g["ranks"]))
    print("  staging copies: device->host %d (%s), host->device %d (%s); reductions on the "
          "device %d (%s)" % (g["d2h_copies"], fmt_b(g["d2h_bytes"]), g["h2d_copies"],
                              fmt_b(g["h2d_bytes"]), g["dev_reduces"],
                              fmt_b(g["dev_reduce_bytes"])))
    print("  staged calls: whole %d, pipelined %d (%d with a device buffer) in %d chunks" % (
        g["whole_calls"], g["pipe_calls"], g["pipe_dev_calls"], g["pipe_chunks"]))
    print("  staging buffers: made %d, reused %d; pinned %d (%s), refused %d (pageable)" % (
        g["buf_allocs"], g["buf_reuses"], g["pin_regs"], fmt_b(g["pin_bytes"]),
        g["pin_failures"]))
    if "node_dev_calls" in g:  # (reports of older libraries lack them)
        print("  node collectives unstaged: %d with a device buffer, %d by IPC, %s reduced by "
              "IPC" % (g["node_dev_calls"], g["node_ipc_calls"], fmt_b(g["node_ipc_bytes"])))


def print_report(m, top):
    print("hcomm job statistics: %d of %d ranks reported%s" % (
        len(m["ranks"]), m["size"],
        "" if not m["missing"] else " (missing: %s)" % ",".join(map(str, m["missing"]))))
    print("\ntop operations by time (all ranks together):")
    print("  %-14s %8s %12s %12s %12s %10s %14s" % ("op", "share", "time", "calls", "bytes",
                                                   "mean_us", "worst p99_us"))
    for e in m["ops"][:top]:
        print("  %-14s %7.1f%% %12s %12d %12s %10.2f %9.2f (r%d)" % (
            e["op"], 100 * e["share"], fmt_s(e["time_s"]), e["calls"], fmt_b(e["bytes"]),
            e["mean_us"], e["p99_us_max"], e["p99_rank"]))
    print("\nper operation, the rank that arrived last (least %s; the others waited for it):"
          % "time inside")
    for e in m["ops"][:top]:
        if "last_to_arrive" not in e:
            continue
        if e.get("asymmetric"):
            tag = "asymmetric: a root or sender blocks least by design"
        else:
            tag = "straggler" if e.get("straggler") is not None else "no clear straggler"
        print("  %-14s rank %d: %s %s vs median %s (most: rank %d, %s) [%s]" % (
            e["op"], e["last_to_arrive"], fmt_s(e["last_s"]),
            "blocked" if e["by"] == "wait_s" else "inside", fmt_s(e["median_s"]),
            e["most_waiting"], fmt_s(e["most_s"]), tag))
    if m["pairs"]:
        print("\nbusiest peer pairs (bytes sent, HCOMM_STATS_LEVEL=2):")
        for p in m["pairs"]:
            print("  rank %d -> %d  %12s in %d messages via %s" % (
                p["from"], p["to"], fmt_b(p["bytes"]), p["msgs"], p["driver"]))
        print("\nbusiest links (node pairs, by driver):")
        for lk in m["links"]:
            a, b = lk["nodes"]
            where = "inside %s" % a if a == b else "%s <-> %s" % (a, b)
            print("  %-40s %-6s %12s" % (where, lk["driver"], fmt_b(lk["bytes"])))
    else:
        print("\n(peer pairs and links: run with HCOMM_STATS_LEVEL=2)")
    if m["gpu"]:
        print_gpu(m["gpu"])


def main(argv):
    args = argv[1:]
    as_json = False
    top = 10
    paths = []
    i = 0
    while i < len(args):
        a = args[i]
        if a in ("-h", "--help"):
            print(__doc__.strip())
            return 0
        if a == "--json":
            as_json = True
        elif a == "--top":
            i += 1
            if i == len(args) or not args[i].isdigit() or int(args[i]) < 1:
                die("--top: expected a positive number")
            top = int(args[i])
        elif a.startswith("-"):
            die("unknown option %s (see --help)" % a)
        else:
            paths.append(a)
        i += 1
    if not paths:
        die("usage: hcomm_stats [--json] [--top N] FILE|DIR ...")
    m = merge(read_files(paths), top)
    if as_json:
        json.dump(m, sys.stdout, indent=1)
        print()
    else:
        print_report(m, top)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
