#!/usr/bin/python3
"""test_hcomm_stats_straggler.py HCOMM_STATS: hcomm_stats' straggler rule.

Synthetic HCOMM_STATS_FILE records (no job, no build of the library) go
through the tool. A rank is a straggler when its time inside (level 2: its
time blocked) is below 0.8 x the median AND the gap per call exceeds 50 us
(tools/hcomm_stats.py, STRAGGLER_FLOOR_US):
  - microsecond gaps are not flagged, on one call (6.7 us vs a median of
    9.3 us, the case that was reported as a straggler) and on 10^5 calls
    (0.5 s vs 0.93 s: 2.15 us per call under the median), though all are
    below 0.8 x the median;
  - a 20 ms sleep before each of 10 barriers is flagged, at level 1
    (time_s) and level 2 (wait_s), and so is a gap just over the floor;
  - a gap just under the floor, and a large gap per call that is within
    0.8 x the median, are not;
  - send/recv and rooted operations stay "asymmetric";
  - --help states the rule;
  - a folder that also holds a log, a script, a binary file and a
    subfolder is merged with a note per skipped file (exit 0); a non-report
    file named alone still fails (exit 2).
Exit 0 pass, 1 fail.
"""
import json
import os
import subprocess
import sys
import tempfile

TOOL = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "hcomm_stats.py")
fails = 0


def check(cond, what):
    global fails
    print("%s: %s" % ("ok" if cond else "FAIL", what))
    if not cond:
        fails += 1


def run(args):
    p = subprocess.run([sys.executable, TOOL] + args, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, universal_newlines=True, timeout=60)
    return p.returncode, p.stdout


def job(d, name, op, times, calls, key="time_s"):
    """One file per rank: rank r spent times[r] seconds in `calls` calls of op."""
    path = os.path.join(d, name)
    os.mkdir(path)
    n = len(times)
    for r, t in enumerate(times):
        recs = [{"type": "rank", "report": 0, "rank": r, "size": n, "level": 2 if key == "wait_s"
                 else 1, "why": "finalize", "node": 0, "nodes": [0] * n},
                {"type": "op", "report": 0, "rank": r, "op": op, "calls": calls, "bytes": 0,
                 "timed": calls, "time_s": t + (1e-6 if key == "wait_s" else 0.0),
                 "mean_us": t / calls * 1e6, "p50_us": t / calls * 1e6,
                 "p99_us": t / calls * 1e6, "max_us": t / calls * 1e6}]
        if key == "wait_s":
            recs[1]["wait_s"] = t
        with open(os.path.join(path, "st.%d.json" % r), "w") as f:
            for rec in recs:
                f.write(json.dumps(rec) + "\n")
    return path


def verdict(path, op):
    """(straggler or None, gap_per_call_us, the report's line of op)"""
    rc, out = run(["--json", path])
    if rc != 0:
        check(False, "hcomm_stats --json %s exit %d: %s" % (path, rc, out))
        return None, None, ""
    m = json.loads(out)
    e = [x for x in m["ops"] if x["op"] == op][0]
    rc, text = run([path])
    line = [ln for ln in text.splitlines() if ln.startswith("  %s " % op) and "rank" in ln]
    return e.get("straggler"), e.get("gap_per_call_us"), line[0] if line else ""


with tempfile.TemporaryDirectory() as d:
    # (name, op, per-rank seconds, calls, key, want straggler, what)
    cases = [
        ("us1", "barrier", [6.7e-6, 9.3e-6, 9.6e-6], 1, "time_s", None,
         "3-rank barrier, 6.7 us vs median 9.3 us in one call"),
        ("us2", "barrier", [5.0e-6, 9.3e-6], 1, "time_s", None,
         "2-rank barrier, 5.0 us vs 9.3 us in one call"),
        ("us_many", "barrier", [0.5, 0.93], 100000, "time_s", None,
         "2-rank barrier, 10^5 calls, 0.5 s vs 0.93 s (2.15 us per call under the median)"),
        ("us4", "allreduce", [3e-6, 9e-6, 9.5e-6, 10e-6], 1, "time_s", None,
         "4 ranks, 3 us vs ~9.5 us"),
        ("sleep20", "barrier", [0.2016, 0.2015, 0.2014, 0.0002], 10, "time_s", 3,
         "rank 3 sleeps 20 ms before each of 10 barriers (level 1)"),
        ("sleep20w", "barrier", [0.2016, 0.2015, 0.2014, 0.0002], 10, "wait_s", 3,
         "rank 3 sleeps 20 ms before each of 10 barriers (level 2, wait_s)"),
        ("one20", "allreduce", [0.0003, 0.0203], 1, "time_s", 0,
         "2 ranks, one allreduce 20 ms apart"),
        ("above", "barrier", [0.0, 60e-6 * 100, 60e-6 * 100], 100, "time_s", 0,
         "60 us per call over 100 calls (just over the floor)"),
        ("below", "barrier", [0.0, 40e-6 * 100, 40e-6 * 100], 100, "time_s", None,
         "40 us per call over 100 calls (just under the floor)"),
        ("ratio", "allreduce", [0.95, 1.0, 1.0], 1000, "time_s", None,
         "50 us per call but 0.95 x the median (the relative rule)"),
    ]
    for name, op, times, calls, key, want, what in cases:
        got, gap, line = verdict(job(d, name, op, times, calls, key), op)
        check(got == want, "%s: straggler %s (want %s, gap %s us per call)" % (what, got, want, gap))
        tag = "[straggler]" if want is not None else "[no clear straggler]"
        check(tag in line, "%s: report line says %s: %r" % (what, tag, line))
    # send/recv: least time by design, never a straggler tag
    got, gap, line = verdict(job(d, "send", "send", [0.0001, 0.5], 10), "send")
    check("asymmetric" in line and "[straggler]" not in line, "send is asymmetric: %r" % line)
    # a folder with other files besides the reports
    mixed = job(d, "mixed", "barrier", [0.2016, 0.2015, 0.2014, 0.0002], 10)
    with open(os.path.join(mixed, "job.log"), "w") as f:
        f.write("[hcomm r0] warn: something\n")
    with open(os.path.join(mixed, "run.sh"), "w") as f:
        f.write("#!/bin/sh\nhcommrun -n 4 ./train\n")
    with open(os.path.join(mixed, "core"), "wb") as f:
        f.write(bytes(range(256)))
    os.mkdir(os.path.join(mixed, "sub"))
    rc, out = run([mixed])
    check(rc == 0 and "[straggler]" in out, "a folder with a log and a script: merged (exit %d)" % rc)
    for name in ("job.log", "run.sh", "core"):
        check("skipping %s: not a statistics report" % os.path.join(mixed, name) in out,
              "a note says %s is skipped" % name)
    rc, out = run([os.path.join(mixed, "job.log")])
    check(rc == 2 and "not a JSON line" in out, "a log named alone: exit 2 (%d): %r" % (rc, out))
    rc, out = run(["--help"])
    check(rc == 0 and "0.8 x the median" in out and "50 us" in out,
          "--help states the rule (0.8 x the median, 50 us per call)")

print("test_hcomm_stats_straggler: %s" % ("all checks passed" if not fails else
                                          "%d check(s) failed" % fails))
sys.exit(1 if fails else 0)
