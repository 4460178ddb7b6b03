#!/usr/bin/python3
"""Checks of the benchmark tools' output that need parsing: runs a tool
under hcommrun, reads its table and its -J JSON lines back, and fails
(exit 1, the reason on stderr) when a key is missing, a size is not the one
asked for, a value is inconsistent or a result is wrong.

  check_bench.py --hcommrun H --bindir D --profiles P [--timeout S] CHECK

CHECK is one of the functions named check_* below (without the prefix).
Exit 0 passed, 1 failed, 77 skipped (a peer library that is not installed:
"skipped: <why>" on stdout).
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

COLL_KEYS = ["tool", "lib", "nranks", "dtype", "op", "root", "blocking", "in_place", "bytes",
             "count", "time_us", "p50_us", "p99_us", "min_us", "max_us", "algbw_GBps",
             "busbw_GBps", "wrong"]
PP_KEYS = ["tool", "lib", "mode", "bytes", "lat_us", "p50_us", "p99_us", "MBps"]
ML_KEYS = ["tool", "lib", "profile", "nranks", "steps", "step_us_mean", "step_us_p50",
           "step_us_p99", "bytes_per_step", "eff_GBps", "wrong"]
C_DTYPES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int8": 1, "uint8": 1,
            "int32": 4, "uint32": 4, "int64": 8, "uint64": 8}
NCCL_DTYPES = ["float", "half", "bfloat16", "double", "int8", "uint8", "int32", "uint32",
               "int64", "uint64"]
PER_RANK = {"allgather", "reduce_scatter", "alltoall"}  # of the mixed_load profiles
# the *_bw tools whose size is nranks blocks of whole elements
COLL_PER_RANK = PER_RANK | {"gather", "scatter", "alltoallv"}
CSV_COLL_HEADER = ("size,count,type,redop,root,time_us,algbw_GBs,busbw_GBs,wrong,"
                   "ip_time_us,ip_algbw_GBs,ip_busbw_GBs,ip_wrong,"
                   "p50_us,p99_us,ip_p50_us,ip_p99_us")

ARGS = None


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failed(msg)


def run(np, tool, *args, rc=0, env=None):
    """Runs tool under hcommrun; returns (stdout, stderr). rc None: any."""
    cmd = [ARGS.hcommrun, "-n", str(np), "--timeout", str(ARGS.timeout),
           os.path.join(ARGS.bindir, tool)] + [str(a) for a in args]
    full_env = dict(os.environ)
    full_env.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env,
                       timeout=ARGS.timeout + 10)
    print("$ " + " ".join(cmd))
    sys.stdout.write(p.stdout)
    sys.stderr.write(p.stderr)
    if rc is not None:
        expect(p.returncode == rc, "%s exited %d, expected %d" % (tool, p.returncode, rc))
    return p.stdout, p.stderr, p.returncode


def read_json(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            try:
                rows.append(json.loads(line))
            except ValueError as e:
                raise Failed("%s:%d: not a JSON object: %s (%r)" % (path, n, e, line))
    expect(rows, "%s: no JSON lines" % path)
    return rows


def keys_present(rows, keys):
    for r in rows:
        missing = [k for k in keys if k not in r]
        expect(not missing, "JSON row lacks %s: %s" % (missing, r))


def table_rows(out):
    return [l.split() for l in out.splitlines() if l.strip() and not l.startswith("#")]


def sizes(lo, hi, f):
    s, out = lo, []
    while s <= hi:
        out.append(s)
        s = 1 if s == 0 else s * f
    return out


def close(a, b, rel=0.02):
    return abs(a - b) <= rel * max(abs(a), abs(b), 1e-9)


def coll_json(tool, np, lo, hi, f, extra, dtypes=("float32",), ops=None, root=-1, blocking=1,
              average="max"):
    """Runs a collective tool with -J and checks every row."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "out.json")
        out, _, _ = run(np, tool, "-b", lo, "-e", hi, "-f", f, "-n", 3, "-w", 1, "-J", path,
                        *extra)
        rows = read_json(path)
    keys_present(rows, COLL_KEYS)
    name = tool[:-3]
    got = {}
    for r in rows:
        expect(r["tool"] == tool and r["lib"] == "hcomm", "tool/lib: %s" % r)
        expect(r["nranks"] == np, "nranks %s, expected %d" % (r["nranks"], np))
        expect(r["root"] == root, "root %s, expected %d" % (r["root"], root))
        expect(r["blocking"] == blocking, "blocking %s, expected %d" % (r["blocking"], blocking))
        expect(r.get("average") == average, "average %s, expected %s" % (r.get("average"),
                                                                         average))
        expect(r["wrong"] == 0, "wrong %s in %s" % (r["wrong"], r))
        expect(r["dtype"] in C_DTYPES, "dtype %s is not an hcomm C name" % r["dtype"])
        esize = C_DTYPES[r["dtype"]]
        expect(r["count"] * esize == r["bytes"], "count * element size != bytes: %s" % r)
        expect(0 < r["min_us"] <= r["p50_us"] <= r["p99_us"] <= r["max_us"],
               "min <= p50 <= p99 <= max fails: %s" % r)
        # time_us is the mean of the iterations reduced over the ranks (-a),
        # min/p50/p99/max their order statistics: the mean lies in min..max
        # whatever -a is (docs/bench.md, "Columns")
        expect(r["min_us"] * 0.999 <= r["time_us"] <= r["max_us"] * 1.001,
               "time is outside min..max: %s" % r)
        expect(close(r["algbw_GBps"], r["bytes"] / r["time_us"] / 1e3),
               "algbw != bytes / time: %s" % r)
        got.setdefault((r["dtype"], r["op"]), []).append((r["bytes"], r["in_place"]))
    # every size asked for, rounded down to whole elements (per rank), in
    # both blocks, for every dtype and op
    for dt in dtypes:
        for op in ops or (["none"] if name not in ("allreduce", "reduce", "reduce_scatter")
                          else ["sum"]):
            unit = C_DTYPES[dt] * (np if name in COLL_PER_RANK else 1)
            want = []
            for s in sizes(lo, hi, f):
                b = s // unit * unit
                if (b or not s) and (b, 0) not in want:
                    want += [(b, 0), (b, 1)]
            expect(got.get((dt, op)) == want,
                   "%s %s: rows (bytes, in_place) %s, expected %s" % (dt, op, got.get((dt, op)),
                                                                      want))
    expect(len(rows) == sum(len(v) for v in got.values()), "rows of unexpected dtypes or ops")
    # the table has one row per pair of JSON rows, with the same size
    table = table_rows(out)
    expect(len(table) * 2 == len(rows), "%d table rows for %d JSON rows" % (len(table),
                                                                           len(rows)))
    for t, oop, ip in zip(table, rows[::2], rows[1::2]):
        expect(int(t[0]) == oop["bytes"], "table size %s != JSON bytes %d" % (t[0], oop["bytes"]))
        expect(len(t) == 17, "a table row has %d columns, expected 17: %s" % (len(t), t))
        # the text's time, p50, p99 of each block: those of its JSON row, so
        # within its min..max, and p50 <= p99
        for (ct, c50, c99), r in (((5, 9, 10), oop), ((11, 15, 16), ip)):
            tt, t50, t99 = float(t[ct]), float(t[c50]), float(t[c99])
            expect(t50 <= t99, "table p50 %s > p99 %s: %s" % (t[c50], t[c99], t))
            for v in (tt, t50, t99):
                expect(r["min_us"] - 0.006 <= v <= r["max_us"] + 0.006,
                       "table time/p50/p99 %s outside the JSON's min..max: %s / %s" % (v, t, r))
    return out, rows


def check_json_allreduce():
    coll_json("allreduce_bw", 2, 8, 65536, 8, [])


def check_json_allgather():
    coll_json("allgather_bw", 3, 8, 12288, 4, [])


def check_json_broadcast_root():
    coll_json("broadcast_bw", 3, 4, 4096, 16, ["-r", 1], root=1)


def check_json_reduce_root():
    coll_json("reduce_bw", 3, 8, 65536, 8, ["-r", 2, "-o", "all"], root=2,
              ops=["sum", "prod", "max", "min", "avg"])


def check_json_gather():
    coll_json("gather_bw", 3, 8, 12288, 4, ["-r", 1], root=1)


def check_json_scatter():
    coll_json("scatter_bw", 3, 8, 12288, 4, [], root=0)


def check_json_alltoallv_nonblocking():
    coll_json("alltoallv_bw", 3, 12, 49152, 16, ["-z", 0], blocking=0)


def check_json_reduce_scatter_nonblocking():
    coll_json("reduce_scatter_bw", 3, 12, 12288, 8, ["-z", 0, "-o", "all"],
              ops=["sum", "prod", "max", "min", "avg"], blocking=0)


def check_dtype_all():
    """-d all: every dtype, in the table's nccl names and JSON's C names."""
    for tool, np, ops in (("allreduce_bw", 2, ["sum", "prod", "max", "min", "avg"]),
                          ("alltoall_bw", 3, None)):
        extra = ["-d", "all"] + (["-o", "all"] if ops else [])
        out, rows = coll_json(tool, np, 96, 6144, 64, extra, dtypes=list(C_DTYPES), ops=ops)
        types = [t[2] for t in table_rows(out)]
        expect(sorted(set(types)) == sorted(NCCL_DTYPES), "table types %s" % sorted(set(types)))
        # one block of rows per dtype, in the order of the usage
        order = [t for i, t in enumerate(types) if i == 0 or types[i - 1] != t]
        expect(order == NCCL_DTYPES, "dtype blocks in the order %s" % order)


def check_average():
    """-a 0/1/2/3 are accepted, named in the header and the JSON, and the
    reported time sits where its reduction puts it among the iterations
    (coll_json: min <= p50 <= p99 <= max and min <= time <= max on every
    row, whatever -a is, in the JSON and the table)."""
    for a, name in ((0, "rank0"), (1, "mean"), (2, "min"), (3, "max")):
        out, rows = coll_json("allreduce_bw", 2, 1024, 65536, 8, ["-a", a], average=name)
        expect("average %d (%s)" % (a, name) in out, "header lacks 'average %d (%s)'" % (a, name))
        expect(all(r["min_us"] <= r["max_us"] for r in rows), "-a %d: min_us > max_us" % a)


def csv_rows(out, header, ncols):
    lines = [l for l in out.splitlines() if l.strip()]
    expect(lines and lines[0] == header, "CSV header %r, expected %r" % (lines[:1], header))
    expect(len(header.split(",")) == ncols, "the expected header has not %d columns" % ncols)
    rows = [l.split(",") for l in lines[1:]]
    expect(rows, "CSV: no rows")
    for r in rows:
        expect(len(r) == ncols, "CSV row with %d columns, expected %d: %s" % (len(r), ncols, r))
    return rows


def check_csv():
    """--csv: nothing but the header and one row per size (no '#' lines),
    every row as many columns as the header, the values those of -J."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ag.json")
        out, _, _ = run(3, "allgather_bw", "-b", 12, "-e", 12288, "-f", 4, "-n", 3, "-w", 1,
                        "--csv", "-J", path)
        rows = read_json(path)
    table = csv_rows(out, CSV_COLL_HEADER, 17)
    want = [s // 12 * 12 for s in sizes(12, 12288, 4)]
    expect([int(t[0]) for t in table] == want, "CSV sizes %s, expected %s" % (
        [t[0] for t in table], want))
    expect(len(rows) == 2 * len(table), "%d JSON rows for %d CSV rows" % (len(rows), len(table)))
    for t, oop, ip in zip(table, rows[::2], rows[1::2]):
        expect(int(t[1]) == oop["count"] and t[2] == "float" and t[3] == "none" and t[4] == "-1",
               "CSV count/type/redop/root: %s" % t)
        expect(t[8] == "0" and t[12] == "0", "CSV wrong columns: %s" % t)
        for col, key, r in ((5, "time_us", oop), (9, "time_us", ip), (13, "p50_us", oop),
                            (14, "p99_us", oop), (15, "p50_us", ip), (16, "p99_us", ip)):
            expect(abs(float(t[col]) - r[key]) <= 0.0015,
                   "CSV column %d (%s) %s != JSON %s" % (col, key, t[col], r[key]))
    for mode, cols in (("lat", "bytes,lat_us,p50_us,p99_us,MB/s"),
                       ("bw", "bytes,msg_us,msg_p50_us,msg_p99_us,MB/s")):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pp.json")
            out, _, _ = run(2, "pingpong", "-M", mode, "-W", 8, "-b", 0, "-e", 4096, "-f", 8,
                            "-n", 10, "-w", 2, "--csv", "-J", path)
            rows = read_json(path)
        table = csv_rows(out, cols, 5)
        expect([int(t[0]) for t in table] == sizes(0, 4096, 8), "pingpong CSV sizes %s" % (
            [t[0] for t in table]))
        expect([r["bytes"] for r in rows] == [int(t[0]) for t in table],
               "pingpong CSV and JSON sizes differ")
        for t, r in zip(table, rows):
            expect(abs(float(t[1]) - r["lat_us"]) <= 0.00015,
                   "pingpong CSV %s != JSON lat_us %s" % (t[1], r["lat_us"]))


def check_pingpong_modes():
    asked = sizes(0, 65536, 16)
    for mode in ("lat", "bw", "bibw"):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "pp.json")
            out, _, _ = run(2, "pingpong", "-M", mode, "-W", 16, "-b", 0, "-e", 65536, "-f", 16,
                            "-n", 20, "-w", 2, "-J", path)
            rows = read_json(path)
        keys_present(rows, PP_KEYS)
        expect(("mode %s" % mode) in out, "header lacks 'mode %s'" % mode)
        table = table_rows(out)
        expect([int(t[0]) for t in table] == asked, "table sizes %s" % [t[0] for t in table])
        expect([r["bytes"] for r in rows] == asked, "JSON sizes %s" % [r["bytes"] for r in rows])
        msgs = {"lat": 1, "bw": 16, "bibw": 32}[mode]
        for r in rows:
            expect(r["tool"] == "pingpong" and r["lib"] == "hcomm" and r["mode"] == mode,
                   "tool/lib/mode: %s" % r)
            expect(r.get("wrong") == 0, "wrong: %s" % r)
            expect(r["lat_us"] > 0, "times: %s" % r)
            if r["bytes"]:
                expect(close(r["MBps"], r["bytes"] / r["lat_us"]),
                       "MBps != bytes / lat_us: %s" % r)
            # the samples (min, p50, p99, max) are round trips halved (lat)
            # or windows of msgs messages divided by msgs: per message, as
            # lat_us, their mean
            expect(r["min_us"] * 0.999 <= r["lat_us"] <= r["max_us"] * 1.001,
                   "lat_us is outside the samples' min..max: %s" % r)
            expect(r["min_us"] <= r["p50_us"] <= r["p99_us"] <= r["max_us"],
                   "min <= p50 <= p99 <= max fails: %s" % r)
        # the table's columns: those of the JSON rows (per message)
        for t, r in zip(table, rows):
            lat, p50, p99 = float(t[1]), float(t[2]), float(t[3])
            expect(p50 <= p99, "table p50 > p99: %s" % t)
            for v in (lat, p50, p99):
                expect(r["min_us"] - 0.0006 <= v <= r["max_us"] + 0.0006,
                       "table %s outside the JSON's min..max (%s mode %s)" % (t, r, msgs))


def profile_bytes(text, np):
    """bytes per step of a profile, rounded as mixed_load rounds."""
    total = 0
    for line in text.splitlines():
        w = line.split("#")[0].split()
        if not w:
            continue
        m = re.fullmatch(r"(\d+)([KMG]?)(i?B)?", w[1])
        b = int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]
        unit = 4 * (np if w[0] in PER_RANK else 1)
        total += b // unit * unit * int(w[2])
    return total


def mixed_json(np, args, profile_text, name, blocking=0, rc=0, env=None):
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ml.json")
        out, err, _ = run(np, "mixed_load", "-n", 3, "-w", 1, "-J", path, *args, rc=rc, env=env)
        rows = read_json(path)
    expect(len(rows) == 1, "%d JSON rows, expected 1" % len(rows))
    r = rows[0]
    keys_present(rows, ML_KEYS)
    expect(r["tool"] == "mixed_load" and r["lib"] == "hcomm", "tool/lib: %s" % r)
    expect(r["profile"] == name, "profile %s, expected %s" % (r["profile"], name))
    expect(r["nranks"] == np and r["steps"] == 3, "nranks/steps: %s" % r)
    expect(r["blocking"] == blocking, "blocking: %s" % r)
    want = profile_bytes(profile_text, np)
    expect(r["bytes_per_step"] == want, "bytes_per_step %d, expected %d" % (r["bytes_per_step"],
                                                                            want))
    expect(0 < r["step_us_min"] <= r["step_us_p50"] <= r["step_us_p99"] <= r["step_us_max"],
           "step times: min <= p50 <= p99 <= max fails: %s" % r)
    expect(r["step_us_min"] * 0.999 <= r["step_us_mean"] <= r["step_us_max"] * 1.001,
           "step mean outside min..max: %s" % r)
    expect(close(r["eff_GBps"], r["bytes_per_step"] / r["step_us_mean"] / 1e3),
           "eff_GBps != bytes_per_step / step_us_mean: %s" % r)
    row = table_rows(out)
    expect(len(row) == 1 and int(row[0][5]) == want, "table row: %s" % row)
    # mean, p50, p99, min, max: the JSON's, in order
    vals = [float(v) for v in row[0][:5]]
    for v, k in zip(vals, ("step_us_mean", "step_us_p50", "step_us_p99", "step_us_min",
                           "step_us_max")):
        expect(abs(v - r[k]) <= 0.006, "table %s %s != JSON %s" % (k, v, r[k]))
    return r


def check_mixed_builtin():
    with open(os.path.join(ARGS.profiles, "mixed.txt")) as f:
        text = f.read()
    r = mixed_json(2, [], text, "mixed")  # the default profile
    expect(r["wrong"] == 0, "wrong: %s" % r)
    r = mixed_json(2, ["-P", "mixed", "-z", 1], text, "mixed", blocking=1)
    expect(r["wrong"] == 0, "wrong: %s" % r)


def check_mixed_file():
    # every collective, sizes that round (allgather 1000 B over 3 ranks)
    text = ("# a test profile\n"
            "allreduce 4K 3      # comment\n"
            "\tallgather 1000 2\n"
            "\n"
            "broadcast 64K 1\n"
            "reduce_scatter 12K 2\n"
            "alltoall 96K 2\n")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "mine.txt")
        with open(path, "w") as f:
            f.write(text)
        for z in (0, 1):
            r = mixed_json(3, ["-p", path, "-z", z], text, "mine", blocking=z)
            expect(r["wrong"] == 0, "wrong: %s" % r)
            expect(r.get("messages_per_step") == 10, "messages_per_step: %s" % r)


def check_mixed_bad_profile():
    """A line that does not parse: exit 2, the file, the line and the
    offending word named."""
    cases = [("allreduc 4K 1", "unknown collective 'allreduc'"),
             ("allreduce 4Q 1", "bad size '4Q'"),
             ("allreduce 4K", "without a count per step"),
             ("allreduce 4K 0", "bad count per step '0'"),
             ("allreduce 4K 1 2", "more than three fields"),
             ("allgather 8 1", "no whole float32 element")]
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "bad.txt")
        for line, msg in cases:
            with open(path, "w") as f:
                f.write("# line 1\nallreduce 8K 1\n%s\nbroadcast 4K 1\n" % line)
            _, err, _ = run(3, "mixed_load", "-p", path, "-n", 1, "-w", 0, rc=2)
            expect("%s:3: " % path in err, "stderr does not name %s:3" % path)
            expect(msg in err, "stderr does not say %r" % msg)
        with open(path, "w") as f:
            f.write("# nothing but comments\n\n")
        _, err, _ = run(2, "mixed_load", "-p", path, rc=2)
        expect("no messages" in err, "an empty profile is not refused")
    _, err, _ = run(2, "mixed_load", "-p", os.path.join(ARGS.profiles, "no-such-file.txt"), rc=2)
    expect("cannot open" in err, "a missing profile file is not named")
    _, err, _ = run(2, "mixed_load", "-P", "no-such-profile", rc=2)
    expect("mixed" in err, "an unknown -P does not list the built-ins")


def check_profiles_embedded():
    """The compiled-in profiles are the files of bench/profiles, byte for
    byte, and -P list names exactly them."""
    files = sorted(f[:-4] for f in os.listdir(ARGS.profiles) if f.endswith(".txt"))
    out, _, _ = run(1, "mixed_load", "-P", "list")
    expect(out.split() == files, "-P list says %s, the files are %s" % (out.split(), files))
    for name in files:
        with open(os.path.join(ARGS.profiles, name + ".txt")) as f:
            text = f.read()
        out, _, _ = run(1, "mixed_load", "-P", name, "--show-profile")
        expect(out == text, "built-in %s differs from bench/profiles/%s.txt" % (name, name))
        profile_bytes(text, 4)  # the file parses


def check_json_unwritable():
    _, err, _ = run(2, "allreduce_bw", "-b", 8, "-e", 8, "-J", "/nonexistent-dir/x.json", rc=2)
    expect("-J: cannot open" in err, "an unwritable -J file is not reported")


def check_bad_options():
    """Each tool refuses the options of the others (exit 2, the option
    named), and bad values of the new ones."""
    cases = [("pingpong", ["--blocking", 0], "'--blocking' is not an option"),
             ("pingpong", ["-z", 0], "unknown option '-z'"),
             ("pingpong", ["-M", "fast"], "-M: bad mode 'fast'"),
             ("pingpong", ["-W", 0], "-W: bad window '0'"),
             ("allreduce_bw", ["--mode=bw"], "'--mode' is not an option"),
             ("allreduce_bw", ["-a", 4], "-a: bad value '4'"),
             ("allreduce_bw", ["-z", 2], "-z: bad value '2'"),
             ("allreduce_bw", ["-d", "float8"], "-d: unknown data type 'float8'"),
             ("mixed_load", ["-d", "all"], "unknown option '-d'"),
             ("mixed_load", ["--maxbytes", "1M"], "'--maxbytes' is not an option")]
    for tool, args, msg in cases:
        _, err, _ = run(2, tool, *args, rc=2)
        expect(msg in err, "%s %s: stderr does not say %r" % (tool, args, msg))
        expect(err.count(msg) == 1, "%s %s: said %d times, expected once per job" % (
            tool, args, err.count(msg)))


def check_nccl_tests():
    """nccl-tests' names and flags: all_reduce_perf (a link in the build
    tree) is allreduce_bw; -i steps linearly; -N repeats the sweep; -T is
    accepted; -g/-t/-C/-R/-G are refused saying why; -i with -f refused;
    sendrecv_perf is pingpong; --help lists what is refused."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "ar.json")
        out, err, _ = run(2, "all_reduce_perf", "-b", 8, "-e", 40, "-i", 8, "-N", 2, "-T", 20,
                          "-n", 3, "-w", 1, "-J", path)
        rows = read_json(path)
    want = [8, 16, 24, 32, 40]
    got = [r["bytes"] for r in rows if r["in_place"] == 0]
    expect(got == want * 2, "-i 8 -N 2: sizes %s, expected %s twice" % (got, want))
    expect(all(r["tool"] == "allreduce_bw" and r["wrong"] == 0 for r in rows),
           "all_reduce_perf rows: %s" % rows[:1])
    expect("all_reduce_perf" in out, "the header does not name all_reduce_perf")
    for args, msg in ((["-g", 1], "-g: GPUs per process"), (["-t", 2], "-t: threads per process"),
                      (["-C", 1], "-C: there is no device time"),
                      (["-R", 1], "-R: buffers need no registering"),
                      (["-G", 1], "-G: CUDA graphs"), (["-N", 0], "-N: bad run count '0'"),
                      (["-T", 0], "-T: bad timeout '0'"),
                      (["-i", 8, "-f", 4], "-i and -f: give one")):
        _, err, _ = run(2, "all_reduce_perf", *args, rc=2)
        expect(msg in err, "all_reduce_perf %s: stderr does not say %r: %s" % (args, msg, err))
    out, _, _ = run(2, "sendrecv_perf", "-b", 8, "-e", 8, "-n", 5, "-w", 1)
    expect("# pingpong:" in out, "sendrecv_perf is not pingpong: %s" % out[:200])
    p = subprocess.run([os.path.join(ARGS.bindir, "all_reduce_perf"), "--help"],
                       stdout=subprocess.PIPE, universal_newlines=True, timeout=20)
    expect("nccl-tests options refused" in p.stdout and "-g/--ngpus" in p.stdout,
           "--help does not say which nccl-tests options are refused")


def check_options_before_init():
    """Options are parsed before hcomm_init: a typo exits 2 at once, with no
    rendezvous. Rank 0 of a 2-rank job whose other rank never comes would
    wait in hcomm_init (HCOMM_TIMEOUT=30); with a bad option it must be gone
    within 5 s, having said why, and -h too."""
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    env = dict(os.environ, HCOMM_RANK="0", HCOMM_SIZE="2", HCOMM_LOCAL_RANK="0",
               HCOMM_LOCAL_SIZE="2", HCOMM_BOOTSTRAP="tcp://127.0.0.1:%d" % port,
               HCOMM_JOB_KEY="k", HCOMM_TIMEOUT="30")
    for tool, args, rc, msg in (("allreduce_bw", ["--maxbtyes", "1M"], 2, "--maxbtyes"),
                                ("allreduce_bw", ["-e", "64Q"], 2, "-e: bad size '64Q'"),
                                ("pingpong", ["-M", "fast"], 2, "-M: bad mode 'fast'"),
                                ("mixed_load", ["-n", "x"], 2, "-n: bad"),
                                ("broadcast_bw", ["-h"], 0, "usage:")):
        t0 = time.time()
        p = subprocess.run([os.path.join(ARGS.bindir, tool)] + args, env=env, timeout=25,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True)
        took = time.time() - t0
        expect(p.returncode == rc, "%s %s: exit %d, expected %d: %s" % (tool, args, p.returncode,
                                                                       rc, p.stderr[-300:]))
        expect(took < 5, "%s %s: took %.1f s: hcomm_init ran first" % (tool, args, took))
        expect(msg in p.stdout + p.stderr, "%s %s: does not say %r" % (tool, args, msg))
        expect("[hcomm" not in p.stderr, "%s %s: hcomm logged: %s" % (tool, args, p.stderr))


def check_detects_corruption():
    """With one rank's results damaged (bench_corrupt.so), every tool's
    check fails the run: exit 1, FAILED, wrong > 0 in the JSON."""
    pre = {"LD_PRELOAD": ARGS.corrupt, "HB_CORRUPT": "allreduce"}
    for z in (1, 0):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "x.json")
            # 256 KiB: past HB_FAST_MIN_BYTES, the chunked check
            out, _, _ = run(2, "allreduce_bw", "-b", 64, "-e", "256K", "-f", 64, "-n", 2, "-w",
                            1, "-z", z, "-J", path, rc=1, env=pre)
            rows = read_json(path)
        expect("FAILED" in out, "allreduce_bw -z %d: no FAILED line" % z)
        expect(all(r["wrong"] > 0 for r in rows), "allreduce_bw -z %d: rows with wrong 0" % z)
        expect(len(rows) == 6, "allreduce_bw -z %d: %d rows, expected 6" % (z, len(rows)))
    text = "allgather 4K 1\nallreduce 4K 2\nallreduce 256K 1\nbroadcast 1K 1\n"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "small.txt")
        with open(path, "w") as f:
            f.write(text)
        for z in (0, 1):
            r = mixed_json(2, ["-p", path, "-z", z], text, "small", blocking=z, rc=1, env=pre)
            # 2 checked steps x 3 damaged allreduces
            expect(r["wrong"] == 6, "mixed_load -z %d: wrong %d, expected 6" % (z, r["wrong"]))
    # a second collective: allgather_bw, each float32 hcomm_allgather damaged
    ag = {"LD_PRELOAD": ARGS.corrupt, "HB_CORRUPT": "allgather"}
    for z in (1, 0):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "ag.json")
            out, _, _ = run(3, "allgather_bw", "-b", 12, "-e", "192K", "-f", 128, "-n", 2, "-w",
                            1, "-z", z, "-J", path, rc=1, env=ag)
            rows = read_json(path)
        expect("FAILED" in out, "allgather_bw -z %d: no FAILED line" % z)
        expect(all(r["wrong"] > 0 for r in rows), "allgather_bw -z %d: rows with wrong 0" % z)
        expect(len(rows) == 6, "allgather_bw -z %d: %d rows, expected 6" % (z, len(rows)))
    rec = {"LD_PRELOAD": ARGS.corrupt, "HB_CORRUPT": "recv"}
    for mode, rank in (("lat", "0"), ("lat", "1"), ("bw", "1"), ("bibw", "0")):
        env = dict(rec, HB_CORRUPT_RANK=rank)
        _, err, _ = run(2, "pingpong", "-M", mode, "-b", 64, "-e", 64, "-n", 3, "-w", 1, rc=1,
                        env=env)
        expect("FAILED" in err, "pingpong -M %s: no FAILED message" % mode)


def check_peer_mixed_openmpi():
    """bench/peers/mixed_load_mpi.c, built with Open MPI's mpicc and run by
    its mpirun at 2 ranks, and hcomm's mixed_load on the same small profile:
    both right (wrong 0), the same bytes and messages per step (the sizes
    round alike: allgather 1001 B, reduce_scatter 12300 B and alltoall
    8190 B are not whole float32 elements per rank)."""
    mpicc, mpirun = shutil.which("mpicc.openmpi"), shutil.which("mpirun.openmpi")
    if not mpicc or not mpirun:
        raise Skipped("Open MPI is not installed (no %s)" % " and no ".join(
            n for n, p in (("mpicc.openmpi", mpicc), ("mpirun.openmpi", mpirun)) if not p))
    src = os.path.join(os.path.dirname(ARGS.profiles), "peers", "mixed_load_mpi.c")
    text = ("allreduce 4K 2\nallgather 1001 1\nbroadcast 16K 1\n"
            "reduce_scatter 12300 1\nalltoall 8190 1\n")
    with tempfile.TemporaryDirectory() as d:
        prof, exe, pj = (os.path.join(d, n) for n in ("peer.txt", "mixed_load_mpi", "mpi.json"))
        with open(prof, "w") as f:
            f.write(text)
        p = subprocess.run([mpicc, "-O2", "-o", exe, src], capture_output=True, text=True,
                           timeout=ARGS.timeout)
        sys.stderr.write(p.stderr)
        expect(p.returncode == 0, "mpicc.openmpi %s failed (exit %d)" % (src, p.returncode))
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
                   OMPI_MCA_btl="self,vader", OMPI_MCA_btl_vader_single_copy_mechanism="none")
        cmd = [mpirun, "--oversubscribe", "--bind-to", "none", "-n", "2", exe, "-p", prof,
               "-n", "3", "-w", "1", "-J", pj]
        print("$ " + " ".join(cmd))
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, stdin=subprocess.DEVNULL,
                           timeout=ARGS.timeout + 10)
        sys.stdout.write(p.stdout)
        sys.stderr.write(p.stderr)
        expect(p.returncode == 0, "mixed_load_mpi under mpirun.openmpi exited %d" % p.returncode)
        peer_rows = read_json(pj)
        expect(len(peer_rows) == 1, "mixed_load_mpi: %d JSON rows, expected 1" % len(peer_rows))
        peer = peer_rows[0]
        keys_present(peer_rows, ML_KEYS)
        # hcomm's mixed_load: its own checks (bytes_per_step from the profile)
        mine = mixed_json(2, ["-p", prof], text, "peer")
    expect(peer["lib"] == "openmpi" and peer["profile"] == "peer" and peer["nranks"] == 2,
           "mixed_load_mpi lib/profile/nranks: %s" % peer)
    expect(mine["wrong"] == 0, "mixed_load (hcomm): wrong %s" % mine["wrong"])
    expect(peer["wrong"] == 0, "mixed_load_mpi (openmpi): wrong %s" % peer["wrong"])
    expect(peer["bytes_per_step"] == mine["bytes_per_step"],
           "bytes_per_step: openmpi %s, hcomm %s" % (peer["bytes_per_step"],
                                                     mine["bytes_per_step"]))
    expect(peer.get("messages_per_step") == mine.get("messages_per_step") == 6,
           "messages_per_step: openmpi %s, hcomm %s" % (peer.get("messages_per_step"),
                                                        mine.get("messages_per_step")))
    print("openmpi %.1f us per step, hcomm %.1f us (%d bytes per step)" % (
        peer["step_us_mean"], mine["step_us_mean"], mine["bytes_per_step"]))


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--hcommrun", required=True)
    p.add_argument("--bindir", required=True)
    p.add_argument("--profiles", required=True)
    p.add_argument("--corrupt", default="")
    p.add_argument("--timeout", type=int, default=60)
    p.add_argument("check")
    ARGS = p.parse_args()
    fn = globals().get("check_" + ARGS.check)
    if not fn:
        print("check_bench.py: no check %r" % ARGS.check, file=sys.stderr)
        return 2
    try:
        fn()
    except Skipped as e:
        print("skipped: %s" % e)
        return 77
    except (Failed, subprocess.TimeoutExpired) as e:
        print("check_bench.py %s: FAILED: %s" % (ARGS.check, e), file=sys.stderr)
        return 1
    print("check_bench.py %s: OK" % ARGS.check)
    return 0


if __name__ == "__main__":
    sys.exit(main())
