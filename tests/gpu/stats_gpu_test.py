#!/usr/bin/python3
"""stats_gpu_test.py HCOMMRUN MP_GPU_STATS HCOMM_STATS: the staging counters
in the HCOMM_STATS report (core/stats_gpu.c, docs/observability.md).

2 ranks run known allreduces (tests/gpu/mp_gpu_stats.c calls: 3 of 4099
int32, staged whole, then 2 of 100003 int32, pipelined in 64 KiB chunks),
out of place, with HCOMM_STATS=1 and HCOMM_STATS_FILE. The counters are
read from what finalize printed on stderr and from the JSON "gpu" records,
and must agree with each other and with the copies the calls must make:
  - device buffers (HCOMM_GPU_MODEL=1): one device->host copy of every
    input byte and one host->device copy of every output byte (one copy per
    whole call, one per chunk); two staging buffers made and pinned once,
    reused by the three later calls;
  - host buffers, model on: no copy, no buffer; the pipelined calls still
    counted (every rank chunks alike);
  - no GPU backend: no device memory line and no "gpu" record;
  - every registration refused (HCOMM_GPU_MODEL_FAULT=register): results
    still right, the buffers left pageable and counted so, one warning per
    rank;
  - HCOMM_GPU_STAGE_KEEP=0: nothing kept, every staged call pins its own;
and hcomm_stats merges the ranks' "gpu" records into the job's totals.
"""
import glob
import json
import os
import re
import subprocess
import sys
import tempfile

SMALL, NSMALL, LARGE, NLARGE, CHUNK = 4099, 3, 100003, 2, 65536
NP = 2

LINE1 = re.compile(
    r"^\[hcomm r(\d+)\]   device memory \((\w+)\): staging copies device->host (\d+) / (\d+) B, "
    r"host->device (\d+) / (\d+) B; reductions on the device (\d+) / (\d+) B; staged calls: "
    r"whole (\d+), pipelined (\d+) \((\d+) with a device buffer here\) in (\d+) chunks$")
LINE1_KEYS = ["d2h_copies", "d2h_bytes", "h2d_copies", "h2d_bytes", "dev_reduces",
              "dev_reduce_bytes", "whole_calls", "pipe_calls", "pipe_dev_calls", "pipe_chunks"]
LINE2 = re.compile(
    r"^\[hcomm r(\d+)\]   device staging buffers: made (\d+), reused (\d+); pinned "
    r"\(host_register\) (\d+) / (\d+) B, refused (\d+) \(left pageable\)$")
LINE2_KEYS = ["buf_allocs", "buf_reuses", "pin_regs", "pin_bytes", "pin_failures"]

bad = 0


def fail(msg):
    global bad
    print("FAIL: " + msg)
    bad = 1


def expected(dev, pinned=True, keep=True):
    """The counters one rank must show."""
    sb, lb = SMALL * 4, LARGE * 4
    chunks = (lb + CHUNK - 1) // CHUNK
    data = NSMALL * sb + NLARGE * lb
    e = {"d2h_copies": NSMALL + NLARGE * chunks if dev else 0, "d2h_bytes": data if dev else 0,
         "dev_reduces": 0, "dev_reduce_bytes": 0, "whole_calls": NSMALL if dev else 0,
         "pipe_calls": NLARGE, "pipe_dev_calls": NLARGE if dev else 0,
         "pipe_chunks": NLARGE * chunks}
    e["h2d_copies"], e["h2d_bytes"] = e["d2h_copies"], e["d2h_bytes"]
    calls = NSMALL + NLARGE if dev else 0
    made = (2 if keep else calls) if dev else 0
    e.update({"buf_allocs": made, "buf_reuses": calls - made,
              "pin_regs": made if pinned else 0, "pin_failures": 0 if pinned else made})
    return e


def run(work, name, env, mode, want):
    d = os.path.join(work, name)
    os.makedirs(d)
    cmd = [HCOMMRUN, "-n", str(NP), "--timeout", "120"]
    env = dict(env, HCOMM_STATS="1", HCOMM_STATS_FILE=os.path.join(d, "st.%r.json"),
               HCOMM_GPU_STAGE_CHUNK=str(CHUNK), HCOMM_GPU_IPC="0")
    for k, v in env.items():
        cmd += ["--env", "%s=%s" % (k, v)]
    cmd += [PROG, "calls", mode, str(SMALL), str(NSMALL), str(LARGE), str(NLARGE)]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=200)
    if p.returncode != 0:
        fail("%s: the job failed (%d):\n%s%s" % (name, p.returncode, p.stdout, p.stderr))
        return None
    text = {}
    for line in p.stderr.splitlines():
        for rx, keys in ((LINE1, LINE1_KEYS), (LINE2, LINE2_KEYS)):
            m = rx.match(line)
            if m:
                vals = m.groups()
                r = int(vals[0])
                nums = vals[2:] if rx is LINE1 else vals[1:]
                text.setdefault(r, {}).update(zip(keys, map(int, nums)))
                if rx is LINE1:
                    text[r]["backend"] = vals[1]
    recs = {}
    for f in glob.glob(os.path.join(d, "st.*.json")):
        for line in open(f):
            rec = json.loads(line)
            if rec["type"] == "gpu":
                recs[rec["rank"]] = rec
    if want is None:  # no backend: nothing about device memory
        if text or recs or "device memory" in p.stderr:
            fail("%s: device memory reported with no GPU backend" % name)
        else:
            print("%s: no device memory lines, no gpu record" % name)
        return p
    for r in range(NP):
        t, j = text.get(r), recs.get(r)
        if t is None or j is None or len(t) != len(LINE1_KEYS) + len(LINE2_KEYS) + 1:
            fail("%s: rank %d: no device memory lines or record (text %s, json %s):\n%s"
                 % (name, r, t, j, p.stderr))
            continue
        for k, v in want.items():
            if t[k] != v or j[k] != v:
                fail("%s: rank %d: %s printed %d, recorded %d, expected %d"
                     % (name, r, k, t[k], j[k], v))
        if t["pin_bytes"] != j["pin_bytes"] or t["backend"] != j["backend"] != "model":
            fail("%s: rank %d: text and record disagree: %s / %s" % (name, r, t, j))
        if want["d2h_bytes"]:
            data = NSMALL * SMALL * 4 + NLARGE * LARGE * 4
            print("%s: rank %d: %.3f device->host and %.3f host->device copies per byte"
                  % (name, r, j["d2h_bytes"] / data, j["h2d_bytes"] / data))
    print("%s: counters as expected on %d ranks" % (name, NP))
    return p


def main():
    global HCOMMRUN, PROG
    HCOMMRUN, PROG, tool = sys.argv[1:4]
    model = {"HCOMM_GPU_MODEL": "1"}
    with tempfile.TemporaryDirectory(prefix="hc-gpustats.") as work:
        run(work, "device", model, "dev", expected(True))
        out = subprocess.run([tool, "--json", os.path.join(work, "device")],
                             stdout=subprocess.PIPE, text=True)
        merged = json.loads(out.stdout).get("gpu", {}) if out.returncode == 0 else {}
        for k, v in expected(True).items():
            if merged.get(k) != NP * v:
                fail("hcomm_stats: job total %s = %s, expected %d" % (k, merged.get(k), NP * v))
        human = subprocess.run([tool, os.path.join(work, "device")], stdout=subprocess.PIPE,
                               text=True).stdout
        if "device memory" not in human:
            fail("hcomm_stats: no device memory section:\n" + human)
        run(work, "host", model, "host", expected(False))
        run(work, "nobackend", {"HCOMM_GPU": "none"}, "host", None)
        p = run(work, "refused", dict(model, HCOMM_GPU_MODEL_FAULT="register"), "dev",
                expected(True, pinned=False))
        if p is not None:
            warns = [x for x in p.stderr.splitlines() if "pinning" in x and "failed" in x]
            if len(warns) != NP:
                fail("refused: %d warnings, expected one per rank:\n%s" % (len(warns), p.stderr))
        run(work, "keep0", dict(model, HCOMM_GPU_STAGE_KEEP="0"), "dev",
            expected(True, keep=False))
    print("stats_gpu_test: " + ("FAILED" if bad else "passed"))
    return bad


if __name__ == "__main__":
    sys.exit(main())
