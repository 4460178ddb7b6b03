#!/usr/bin/python3
"""Plot and tabulate the JSON lines of hcomm's bench tools and of the peers.

    scripts/plot-bench.py [-o OUT.png] [--table] [--metric FIELD] [--ours LABEL]
                          [--title TEXT] [--tool T,..] [--dtype D,..] [--op O,..]
                          [--nranks N,..] [--split | --one-figure] FILE[:LABEL] ...

Each FILE holds JSON lines as written by hcomm's tools with `-J FILE`
(allreduce_bw and the other collective tools, pingpong, mixed_load) or by
scripts/peers-json.sh (the same fields, "lib" = openmpi / mpich / gloo).
Blank lines and lines starting with '#' are skipped. `FILE:LABEL` replaces
the "lib" of every row of that file with LABEL (to compare two hcomm builds,
say). A row read twice (same series, same size) is plotted as the median.

Rows are grouped by tool and, for collectives, by dtype, op and nranks; one
line per library (hcomm's in-place and non-blocking rows are lines of their
own). --tool, --dtype, --op and --nranks (comma lists) keep only the rows
that match. Up to 3 groups, the PNG (-o) has one row of two panels per
group; beyond (as `-d all -o all` gives: 50 groups) or with --split, one
figure per metric instead, a panel per group, 12 panels a page:
OUT-busbw.png, OUT-time.png, OUT-pingpong-bw.png, OUT-pingpong-lat.png,
OUT-mixed-eff.png, OUT-mixed-step.png (OUT-busbw-2.png ... for more pages).
The panels:
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


# Panels of a figure when split by metric: 3 columns, 4 rows at most (about
# 1430 x 1430 px); more groups go on further pages (OUT-<metric>-2.png ...).
PANEL_COLS, PANEL_ROWS = 3, 4
# the two panels of a group, by kind: (file name part, what it shows)
PANELS = {"coll": ("busbw", "time"), "pingpong": ("bw", "lat"), "mixed": ("eff", "step")}
# up to this many groups, one figure holds them all (one row of two panels each)
ONE_FIGURE_MAX = 3


def _mpl():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import ticker
    except ImportError:
        print("%s: python3-matplotlib is missing (apt-get install -y python3-matplotlib)"
              % PROG, file=sys.stderr)
        sys.exit(1)
    return plt, ticker


class Painter:
    """Draws one panel (0: bandwidth, 1: time) of a group on an axis."""

    def __init__(self, groups, plt, ticker, small=False):
        self.ticker, self.small = ticker, small
        libs = []
        for g in groups:
            for s in g.order:
                if s[0] not in libs:
                    libs.append(s[0])
        if "hcomm" in libs:  # hcomm keeps the first colour in every plot
            libs.remove("hcomm")
            libs.insert(0, "hcomm")
        cmap = plt.get_cmap("tab10")
        self.libs = libs
        self.color = {lib: cmap(i % 10) for i, lib in enumerate(libs)}
        self.varmark = {}

    def style(self, s):
        markers = "osD^vP*Xh<>"
        if s[1] not in self.varmark:
            self.varmark[s[1]] = len(self.varmark)
        v = self.varmark[s[1]]
        return dict(color=self.color[s[0]],
                    marker=markers[(self.libs.index(s[0]) + v) % len(markers)],
                    markersize=4, linewidth=2.2 if s[0] == "hcomm" else 1.4,
                    linestyle="-" if not s[1] else "-.", alpha=1.0 if not s[1] else 0.8)

    def log2_axis(self, ax, xs):
        ticker = self.ticker
        xs = [x for x in xs if x > 0]
        ax.set_xscale("log", base=2)
        if not xs:
            return
        lo, hi = int(math.floor(math.log2(min(xs)))), int(math.ceil(math.log2(max(xs))))
        step = max(1, int(math.ceil((hi - lo + 1) / (6.0 if self.small else 12.0))))
        ax.xaxis.set_major_locator(ticker.FixedLocator([2.0 ** e for e in range(lo, hi + 1, step)]))
        ax.xaxis.set_minor_locator(ticker.NullLocator())
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(lambda x, _p: fmt_bytes(x)))
        ax.set_xlabel("bytes")

    def finish(self, ax, what):
        ax.grid(True, which="major", alpha=0.35)
        ax.grid(True, which="minor", alpha=0.12)
        ax.set_title(what, fontsize=10)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7 if self.small else 8, loc="best")

    def draw(self, ax, g, which):
        t = group_title(g.key)
        if g.key[0] in ("coll", "pingpong"):
            self.draw_sized(ax, g, which, t)
        else:
            self.draw_mixed(ax, g, which, t)

    def draw_sized(self, ax, g, which, t):
        coll = g.key[0] == "coll"
        field = (("busbw_GBps", "time_us") if coll else ("MBps", "lat_us"))[which]
        for s in g.order:
            st = self.style(s)
            pts = g.curve(s, field)
            if pts:
                ax.plot(*zip(*pts), label=series_name(s), **st)
            p50 = g.curve(s, "p50_us") if which else None
            if p50 and p50 != pts:
                ax.plot(*zip(*p50), linestyle="--", color=st["color"],
                        linewidth=st["linewidth"] * 0.7, alpha=0.8)
        self.log2_axis(ax, g.xs())
        if which:
            ax.set_yscale("log")
            ax.set_ylabel("time per call (us)" if coll else "one-way latency (us)")
            self.finish(ax, "%s: %s (solid mean, dashed p50)" % (t, "time" if coll else "latency"))
        else:
            ax.set_ylim(bottom=0)
            ax.set_ylabel("busbw (GB/s)" if coll else "bandwidth (MB/s)")
            self.finish(ax, "%s: %s" % (t, "bus bandwidth" if coll else "bandwidth"))

    def draw_mixed(self, ax, g, which, t):
        profiles = g.xs()
        width = 0.8 / max(1, len(g.order))
        for i, s in enumerate(g.order):
            st = self.style(s)
            pos = [j - 0.4 + width * (i + 0.5) for j in range(len(profiles))]
            if not which:
                v = [g.value(s, p, "eff_GBps") for p in profiles]
            else:
                v = [g.value(s, p, "step_us_p50") or g.value(s, p, "step_us_mean")
                     for p in profiles]
            ax.bar([p for p, x in zip(pos, v) if x is not None], [x for x in v if x is not None],
                   width, color=st["color"], label=series_name(s))
            if which:
                p99 = [g.value(s, p, "step_us_p99") for p in profiles]
                ax.plot([p for p, x in zip(pos, p99) if x is not None],
                        [x for x in p99 if x is not None], linestyle="none", marker="_",
                        markersize=14, markeredgewidth=2, color="black")
        ax.set_xticks(range(len(profiles)))
        ax.set_xticklabels(profiles)
        ax.set_xlabel("profile")
        if which:
            ax.set_ylabel("step time (us)")
            self.finish(ax, "%s: step time (bar p50, tick p99)" % t)
        else:
            ax.set_ylabel("effective bandwidth (GB/s)")
            self.finish(ax, "%s: bytes per step / mean step time" % t)


def _save(plt, fig, path, title):
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as e:
        print("%s: %s: %s" % (PROG, path, e.strerror or e), file=sys.stderr)
        sys.exit(1)
    plt.close(fig)


def plot(groups, path, title, split=None):
    """Writes the figure(s); returns the paths written. Up to ONE_FIGURE_MAX
    groups (or split False): one figure, a row of two panels per group.
    More (or split True): one figure per metric (OUT-busbw.png,
    OUT-time.png, OUT-pingpong-lat.png ...), a grid of one panel per group,
    PANEL_COLS x PANEL_ROWS per page (OUT-busbw-2.png ...)."""
    plt, ticker = _mpl()
    if split is None:
        split = len(groups) > ONE_FIGURE_MAX
    if not split:
        painter = Painter(groups, plt, ticker)
        fig, axes = plt.subplots(len(groups), 2, figsize=(13, 4.6 * len(groups)), squeeze=False)
        for g, (a1, a2) in zip(groups, axes):
            painter.draw(a1, g, 0)
            painter.draw(a2, g, 1)
        _save(plt, fig, path, title)
        return [path]
    stem, ext = os.path.splitext(path)
    ext = ext or ".png"
    written = []
    per_page = PANEL_COLS * PANEL_ROWS
    for kind in ("coll", "pingpong", "mixed"):
        mine = [g for g in groups if g.key[0] == kind]
        if not mine:
            continue
        painter = Painter(mine, plt, ticker, small=True)
        for which, metric in enumerate(PANELS[kind]):
            name = metric if kind == "coll" else "%s-%s" % (kind, metric)
            pages = [mine[i:i + per_page] for i in range(0, len(mine), per_page)]
            for n, page in enumerate(pages, 1):
                cols = min(PANEL_COLS, len(page))
                rows = (len(page) + cols - 1) // cols
                fig, axes = plt.subplots(rows, cols, figsize=(4.35 * cols, 3.25 * rows),
                                         squeeze=False)
                flat = [ax for r in axes for ax in r]
                for g, ax in zip(page, flat):
                    painter.draw(ax, g, which)
                for ax in flat[len(page):]:
                    ax.set_visible(False)
                out = "%s-%s%s%s" % (stem, name, "-%d" % n if len(pages) > 1 else "", ext)
                _save(plt, fig, out, title)
                written.append(out)
    return written


def apply_filters(rows, a):
    """--tool/--dtype/--op/--nranks: keep the rows that match (a row without
    the field, e.g. pingpong's dtype, is kept by that filter)."""
    def wanted(arg):
        return {w.strip() for w in arg.split(",") if w.strip()} if arg else None

    tools, dtypes, ops, nranks = (wanted(a.tool), wanted(a.dtype), wanted(a.op),
                                  wanted(a.nranks))
    out = []
    for r in rows:
        tool = str(r.get("tool", ""))
        if tools and tool not in tools and (tool[:-3] if tool.endswith("_bw") else tool) not in tools:
            continue
        if dtypes and "dtype" in r and str(r["dtype"]) not in dtypes:
            continue
        if ops and "op" in r and str(r["op"]) not in ops:
            continue
        if nranks and "nranks" in r and str(r["nranks"]) not in nranks:
            continue
        out.append(r)
    return out


def main(argv):
    ap = argparse.ArgumentParser(
        prog=PROG, description="Plot / tabulate JSON lines of hcomm's and the peers' benchmarks.")
    ap.add_argument("files", nargs="+", metavar="FILE[:LABEL]")
    ap.add_argument("-o", "--output", metavar="OUT.png", help="write the plot here (PNG)")
    ap.add_argument("--table", action="store_true", help="print the side-by-side table")
    ap.add_argument("--metric", help="table field (default busbw_GBps / lat_us / eff_GBps)")
    ap.add_argument("--ours", default="hcomm", help="library the ratio is about (hcomm)")
    ap.add_argument("--title", help="title over the whole figure")
    ap.add_argument("--tool", help="only these tools, comma separated (allreduce_bw or "
                    "allreduce, pingpong, mixed_load)")
    ap.add_argument("--dtype", help="only these dtypes, comma separated (float32,bfloat16)")
    ap.add_argument("--op", help="only these reduction ops, comma separated (sum,max)")
    ap.add_argument("--nranks", help="only these job sizes, comma separated")
    sp = ap.add_mutually_exclusive_group()
    sp.add_argument("--split", dest="split", action="store_true", default=None,
                    help="one figure per metric (OUT-busbw.png, OUT-time.png, ...), a panel "
                    "per group; the default beyond %d groups" % ONE_FIGURE_MAX)
    sp.add_argument("--one-figure", dest="split", action="store_false",
                    help="one figure, a row of two panels per group, however many")
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
    n_read = len(rows)
    rows = apply_filters(rows, a)
    if not rows:
        print("%s: no row of the %d read matches --tool/--dtype/--op/--nranks" % (PROG, n_read),
              file=sys.stderr)
        return 2
    groups = build_groups(rows)
    if a.table:
        print_tables(groups, a.metric, a.ours, sys.stdout)
    if a.output:
        for path in plot(groups, a.output, a.title, a.split):
            print("%s: wrote %s (%d group(s), %d row(s))" % (PROG, path, len(groups), len(rows)),
                  file=sys.stderr)
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `| head` ends the table quietly
    sys.exit(main(sys.argv[1:]))
