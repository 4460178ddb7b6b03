#!/usr/bin/python3
"""Plot and tabulate the JSON lines of hcomm's bench tools and of the peers.

    scripts/plot-bench.py [-o OUT.png] [--table] [--metric FIELD] [--ours LABEL]
                          [--title TEXT] FILE[:LABEL] ...

Each FILE holds JSON lines as written by hcomm's tools with `-J FILE`
(allreduce_bw and the other collective tools, pingpong, mixed_load) or by
scripts/peers-json.sh (the same fields, "lib" = openmpi / mpich / gloo).
Blank lines and lines starting with '#' are skipped. `FILE:LABEL` replaces
the "lib" of every row of that file with LABEL (to compare two hcomm builds,
say). A row read twice (same series, same size) is plotted as the median.

Rows are grouped by tool and, for collectives, by dtype, op and nranks; one
line per library (hcomm's in-place and non-blocking rows are lines of their
own). The PNG (-o) has one row of two panels per group:
  collectives  busbw_GBps against bytes (log2 x axis); time_us (solid) and
               p50_us (dashed) against bytes, log-log
  pingpong     one-way latency lat_us (solid) / p50_us (dashed), log-log;
               bandwidth MBps against bytes (log2 x axis)
  mixed_load   eff_GBps per profile; step time p50 (bar) and p99 (tick)
--table prints the merged rows side by side: bytes (or the profile), one
column per library and `ratio` = OURS / best peer (OURS: --ours, default
hcomm; best: the highest value, or the lowest for *_us fields). The metric
is busbw_GBps, lat_us, eff_GBps by tool, or --metric FIELD for every group.

Exit status: 0 done; 2 bad usage, a file that cannot be read or that has no
usable row (the message names the file); 1 other failures.
"""
import argparse
import json
import math
import os
import signal
import statistics
import sys

PROG = "plot-bench.py"


class UsageError(Exception):
    pass


def num(v):
    """v as a finite float, or None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def kind_of(row):
    tool = row.get("tool")
    if not isinstance(tool, str):
        return None
    if tool == "pingpong":
        if num(row.get("bytes")) is None:
            return None
        if num(row.get("lat_us")) is None and num(row.get("MBps")) is None:
            return None
        return "pingpong"
    if tool == "mixed_load":
        if num(row.get("eff_GBps")) is None and num(row.get("step_us_mean")) is None:
            return None
        return "mixed"
    # any other tool with a size and a bandwidth or time is a collective
    if num(row.get("bytes")) is None:
        return None
    if num(row.get("busbw_GBps")) is None and num(row.get("time_us")) is None:
        return None
    return "coll"


def split_arg(arg):
    """FILE[:LABEL] -> (file, label or None). A path that exists as given wins."""
    if os.path.exists(arg) or ":" not in arg:
        return arg, None
    path, label = arg.rsplit(":", 1)
    if not label:
        raise UsageError("%s: empty label after ':'" % arg)
    return path, label


def read_file(arg):
    path, label = split_arg(arg)
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.readlines()
    except OSError as e:
        raise UsageError("%s: %s" % (path, e.strerror or e))
    rows, bad, unusable, first_bad = [], 0, 0, None
    for no, line in enumerate(lines, 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        try:
            row = json.loads(s)
        except ValueError:
            row = None
        if not isinstance(row, dict):
            bad += 1
            first_bad = first_bad or no
            continue
        kind = kind_of(row)
        if kind is None:
            unusable += 1
            continue
        row = dict(row)
        row["_kind"] = kind
        row["_file"] = path
        lib = label or row.get("lib")
        row["_lib"] = str(lib) if lib not in (None, "") else os.path.basename(path)
        rows.append(row)
    if bad:
        print("%s: warning: %s: %d line(s) are not JSON objects (first: line %d), skipped"
              % (PROG, path, bad, first_bad), file=sys.stderr)
    if not rows:
        what = []
        if bad:
            what.append("%d non-JSON line(s)" % bad)
        if unusable:
            what.append("%d JSON row(s) without tool/bytes/busbw_GBps/time_us/lat_us/MBps/"
                        "eff_GBps" % unusable)
        raise UsageError("%s: no usable rows (%s)" % (
            path, ", ".join(what) if what else
            "no data lines" if any(l.strip() for l in lines) else "the file is empty"))
    wrong = sum(1 for r in rows if (num(r.get("wrong")) or 0) > 0)
    if wrong:
        print("%s: warning: %s: %d row(s) report wrong elements" % (PROG, path, wrong),
              file=sys.stderr)
    return rows


def variant_of(row):
    """Suffix of the series name within a library."""
    parts = []
    if row["_kind"] == "coll":
        if num(row.get("in_place")) == 1:
            parts.append("in-place")
        if num(row.get("blocking")) == 0:
            parts.append("nonblocking")
    elif row["_kind"] == "pingpong":
        mode = row.get("mode")
        if mode not in (None, "", "lat"):
            parts.append(str(mode))
    else:
        if num(row.get("blocking")) == 1:
            parts.append("blocking")
        # a peer that left collectives out (gloo: reduce_scatter) moved fewer
        # bytes: its own series, named after what it skipped
        sk = row.get("skipped")
        if isinstance(sk, list) and sk:
            names = sorted({str(s.get("collective", "?")) if isinstance(s, dict) else str(s)
                            for s in sk})
            parts.append("(skips %s)" % ",".join(names))
    return " ".join(parts)


def group_key(row):
    k = row["_kind"]
    if k == "coll":
        return ("coll", row.get("tool"), str(row.get("dtype", "?")), str(row.get("op", "?")),
                row.get("nranks"))
    if k == "pingpong":
        return ("pingpong", "pingpong")
    return ("mixed", "mixed_load", row.get("nranks"))


def group_title(key):
    if key[0] == "coll":
        _, tool, dtype, op, nranks = key
        t = "%s %s %s" % (tool, dtype, op)
        return t + (", %s ranks" % nranks if nranks is not None else "")
    if key[0] == "pingpong":
        return "pingpong"
    return "mixed_load" + (", %s ranks" % key[2] if key[2] is not None else "")


class Group:
    """Rows of one group: series -> x (bytes or profile) -> list of rows."""

    def __init__(self, key):
        self.key = key
        self.series = {}  # (lib, variant) -> {x: [rows]}
        self.order = []

    def add(self, row):
        s = (row["_lib"], variant_of(row))
        if s not in self.series:
            self.series[s] = {}
            self.order.append(s)
        x = str(row.get("profile", "?")) if self.key[0] == "mixed" else int(num(row["bytes"]))
        self.series[s].setdefault(x, []).append(row)

    def value(self, s, x, field):
        vals = [num(r.get(field)) for r in self.series[s].get(x, ())]
        vals = [v for v in vals if v is not None]
        return statistics.median(vals) if vals else None

    def xs(self):
        out = []
        for s in self.order:
            for x in self.series[s]:
                if x not in out:
                    out.append(x)
        return out if self.key[0] == "mixed" else sorted(out)

    def curve(self, s, field, positive=True):
        pts = []
        for x in sorted(self.series[s]):
            v = self.value(s, x, field)
            if v is None or (positive and (v <= 0 or x <= 0)):
                continue
            pts.append((x, v))
        return pts


def series_name(s):
    return s[0] + (" " + s[1] if s[1] else "")


def build_groups(rows):
    groups, order = {}, []
    for r in rows:
        k = group_key(r)
        if k not in groups:
            groups[k] = Group(k)
            order.append(k)
        groups[k].add(r)
    # collectives first (in file order), then pingpong, then mixed
    rank = {"coll": 0, "pingpong": 1, "mixed": 2}
    order.sort(key=lambda k: rank[k[0]])
    return [groups[k] for k in order]


def default_metric(group):
    return {"coll": "busbw_GBps", "pingpong": "lat_us", "mixed": "eff_GBps"}[group.key[0]]


def lower_is_better(field):
    return field.endswith("_us")


def fmt_bytes(x):
    x = float(x)
    for unit, suffix in ((1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")):
        if x >= unit:
            return "%g%s" % (x / unit, suffix)
    return "%g" % x


def fmt_val(v):
    if v is None:
        return "-"
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1000:
        return "%.0f" % v
    if a >= 100:
        return "%.1f" % v
    if a >= 1:
        return "%.3f" % v
    if a >= 0.001:
        return "%.4f" % v
    return "%.3g" % v


def print_tables(groups, metric_opt, ours, out):
    first = True
    for g in groups:
        metric = metric_opt or default_metric(g)
        series = [s for s in g.order if any(g.value(s, x, metric) is not None for x in g.xs())]
        if not first:
            out.write("\n")
        first = False
        if not series:
            out.write("## %s: no row has %s\n" % (group_title(g.key), metric))
            continue
        low = lower_is_better(metric)
        mine = [s for s in series if s == (ours, "")]
        # a series that skipped part of the work (gloo's "(skips ...)") is shown
        # but is no "best peer"
        peers = [s for s in series if s[0] != ours and "(skips " not in s[1]]
        ratio = bool(mine and peers)
        out.write("## %s: %s (%s is better)%s\n" % (
            group_title(g.key), metric, "lower" if low else "higher",
            "; ratio = %s / best peer" % ours if ratio else
            ("" if mine else "; no '%s' rows, no ratio" % ours) if peers else ""))
        xname = "profile" if g.key[0] == "mixed" else "bytes"
        head = [xname] + [series_name(s) for s in series] + (["ratio"] if ratio else [])
        body = []
        for x in g.xs():
            vals = [g.value(s, x, metric) for s in series]
            if all(v is None for v in vals):
                continue
            line = [str(x)] + [fmt_val(v) for v in vals]
            if ratio:
                m = g.value(mine[0], x, metric)
                pv = [g.value(s, x, metric) for s in peers]
                pv = [v for v in pv if v is not None]
                best = (min(pv) if low else max(pv)) if pv else None
                line.append("%.3f" % (m / best) if m is not None and best else "-")
            body.append(line)
        widths = [max(len(r[i]) for r in [head] + body) for i in range(len(head))]
        for r in [head] + body:
            cells = [r[0].rjust(widths[0])] + [c.rjust(max(w, 8)) for c, w in
                                               zip(r[1:], widths[1:])]
            out.write("  ".join(cells).rstrip() + "\n")


def plot(groups, path, title):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        print("%s: python3-matplotlib is missing (apt-get install -y python3-matplotlib)"
              % PROG, file=sys.stderr)
        sys.exit(1)

    libs = []
    for g in groups:
        for s in g.order:
            if s[0] not in libs:
                libs.append(s[0])
    if "hcomm" in libs:  # hcomm keeps the first colour in every plot
        libs.remove("hcomm")
        libs.insert(0, "hcomm")
    cmap = plt.get_cmap("tab10")
    color = {lib: cmap(i % 10) for i, lib in enumerate(libs)}
    markers = "osD^vP*Xh<>"
    varmark = {}

    def style(s):
        if s[1] not in varmark:
            varmark[s[1]] = len(varmark)
        v = varmark[s[1]]
        return dict(color=color[s[0]], marker=markers[(libs.index(s[0]) + v) % len(markers)],
                    markersize=4, linewidth=2.2 if s[0] == "hcomm" else 1.4,
                    linestyle="-" if not s[1] else "-.", alpha=1.0 if not s[1] else 0.8)

    def log2_axis(ax, xs):
        xs = [x for x in xs if x > 0]
        ax.set_xscale("log", base=2)
        if not xs:
            return
        lo, hi = int(math.floor(math.log2(min(xs)))), int(math.ceil(math.log2(max(xs))))
        step = max(1, int(math.ceil((hi - lo + 1) / 12.0)))
        ax.xaxis.set_major_locator(ticker.FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _p: fmt_bytes(x)))
        ax.set_xlabel("bytes")
        for lab in ax.get_xticklabels():
            lab.set_rotation(0)

    def finish(ax, what):
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        ax.set_title(what, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, loc="best")

    fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.6 * len(groups)), squeeze=False)
    for g, (a1, a2) in zip(groups, axes):
        t = group_title(g.key)
        if g.key[0] in ("coll", "pingpong"):
            coll = g.key[0] == "coll"
            bw, tm = ("busbw_GBps", "time_us") if coll else ("MBps", "lat_us")
            for s in g.order:
                st = style(s)
                pts = g.curve(s, bw)
                if pts:
                    a1.plot(*zip(*pts), label=series_name(s), **st)
                pts = g.curve(s, tm)
                if pts:
                    a2.plot(*zip(*pts), label=series_name(s), **st)
                p50 = g.curve(s, "p50_us")
                if p50 and p50 != pts:
                    a2.plot(*zip(*p50), linestyle="--", color=st["color"],
                            linewidth=st["linewidth"] * 0.7, alpha=0.8)
            xs = [x for x in g.xs() if x > 0]
            log2_axis(a1, xs)
            log2_axis(a2, xs)
            a2.set_yscale("log")
            a1.set_ylim(bottom=0)
            if coll:
                a1.set_ylabel("busbw (GB/s)")
                a2.set_ylabel("time per call (us)")
                finish(a1, "%s: bus bandwidth" % t)
                finish(a2, "%s: time (solid mean, dashed p50)" % t)
            else:
                a1.set_ylabel("bandwidth (MB/s)")
                a2.set_ylabel("one-way latency (us)")
                finish(a1, "%s: bandwidth" % t)
                finish(a2, "%s: latency (solid mean, dashed p50)" % t)
        else:
            profiles = g.xs()
            n = max(1, len(g.order))
            width = 0.8 / n
            for i, s in enumerate(g.order):
                st = style(s)
                pos = [j - 0.4 + width * (i + 0.5) for j in range(len(profiles))]
                eff = [g.value(s, p, "eff_GBps") for p in profiles]
                a1.bar([p for p, v in zip(pos, eff) if v is not None],
                       [v for v in eff if v is not None], width, color=st["color"],
                       label=series_name(s))
                p50 = [g.value(s, p, "step_us_p50") or g.value(s, p, "step_us_mean")
                       for p in profiles]
                a2.bar([p for p, v in zip(pos, p50) if v is not None],
                       [v for v in p50 if v is not None], width, color=st["color"],
                       label=series_name(s))
                p99 = [g.value(s, p, "step_us_p99") for p in profiles]
                a2.plot([p for p, v in zip(pos, p99) if v is not None],
                        [v for v in p99 if v is not None], linestyle="none", marker="_",
                        markersize=14, markeredgewidth=2, color="black")
            for ax in (a1, a2):
                ax.set_xticks(range(len(profiles)))
                ax.set_xticklabels(profiles)
                ax.set_xlabel("profile")
            a1.set_ylabel("effective bandwidth (GB/s)")
            a2.set_ylabel("step time (us)")
            finish(a1, "%s: bytes per step / mean step time" % t)
            finish(a2, "%s: step time (bar p50, tick p99)" % t)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        print("%s: %s: %s" % (PROG, path, e.strerror or e), file=sys.stderr)
        sys.exit(1)
    plt.close(fig)


def main(argv):
    ap = argparse.ArgumentParser(
        prog=PROG, description="Plot / tabulate JSON lines of hcomm's and the peers' benchmarks.")
    ap.add_argument("files", nargs="+", metavar="FILE[:LABEL]")
    ap.add_argument("-o", "--output", metavar="OUT.png", help="write the plot here (PNG)")
    ap.add_argument("--table", action="store_true", help="print the side-by-side table")
    ap.add_argument("--metric", help="table field (default busbw_GBps / lat_us / eff_GBps)")
    ap.add_argument("--ours", default="hcomm", help="library the ratio is about (hcomm)")
    ap.add_argument("--title", help="title over the whole figure")
    a = ap.parse_args(argv)
    if not a.output and not a.table:
        ap.error("nothing to do: give -o OUT.png and/or --table")
    try:
        rows = []
        for f in a.files:
            rows += read_file(f)
    except UsageError as e:
        print("%s: %s" % (PROG, e), file=sys.stderr)
        return 2
    groups = build_groups(rows)
    if a.table:
        print_tables(groups, a.metric, a.ours, sys.stdout)
    if a.output:
        plot(groups, a.output, a.title)
        print("%s: wrote %s (%d group(s), %d row(s))" % (PROG, a.output, len(groups), len(rows)),
              file=sys.stderr)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly
    sys.exit(main(sys.argv[1:]))
