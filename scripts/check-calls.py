#!/usr/bin/env python3
"""check-calls.py [--root DIR] OBJECT_LIST...: the layering rule, checked by
what the library's objects call rather than what its sources include.

Each OBJECT_LIST is a file with one object path per line, each built from a
library source (CMake writes build/hcomm_objects.txt, the library's, and
build/hcomm_testdrv_objects.txt, the test drivers'; ctest layers_calls
passes both); an object's source path is what follows ".dir/" in
its path, less ".o" (core/comm.c), its layer the first folder of that path
and its folder the source's directory (core, drv/tcp). `nm` gives every
global symbol each object defines and every one it leaves undefined.

Two rules, both failures:
  1. no object calls (or reads) a symbol defined by a layer above its own.
     The layers, bottom up, are those of scripts/check-layers.sh (its
     `order=(...)` line; docs/architecture.md): a folder may use its own
     layer and the layers below.
  2. no circle of calls spans folders: the graph "folder A uses a symbol
     defined in folder B" has no cycle through two or more folders (drv/mlx5
     may call drv/verbs, but then drv/verbs must not call drv/mlx5). Calls
     inside one folder may go round freely.
Each violation is printed with the object, the symbol and where it is
defined; the exit status is 1 when there is any, 0 otherwise.
"""
import os
import re
import subprocess
import sys


def layer_order(root):
    """The layers, bottom up, from check-layers.sh's order=(...) line."""
    path = os.path.join(root, "scripts", "check-layers.sh")
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*order=\(([^)]*)\)", line)
            if m:
                return m.group(1).split()
    sys.exit("check-calls: no order=(...) line in %s" % path)


def source_of(obj):
    """core/comm.c for .../hcomm_obj.dir/core/comm.c.o, or None."""
    m = re.search(r"\.dir/(?:\./)?(.+)\.o$", obj)
    return m.group(1) if m else None


def read_symbols(objs):
    """{obj: (defined set, undefined set)} from one nm run over all objects."""
    out = subprocess.run(["nm", "-P", "-g", "-A"] + objs, check=True, capture_output=True,
                         text=True).stdout
    syms = {o: (set(), set()) for o in objs}
    for line in out.splitlines():
        # "path/x.c.o: name type [value size]"
        head, _, rest = line.partition(": ")
        fields = rest.split()
        if head not in syms or len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind in ("U", "w", "v") and len(fields) == 2:
            syms[head][1].add(name)
        elif kind not in ("U",):
            syms[head][0].add(name)
    return syms


def cycles(edges, nodes):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return out


def main():
    args = sys.argv[1:]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if len(args) >= 2 and args[0] == "--root":
        root, args = args[1], args[2:]
    if not args:
        sys.exit("usage: check-calls.py [--root DIR] OBJECT_LIST...")
    order = layer_order(root)
    rank = {name: i for i, name in enumerate(order)}
    objs = []
    for path in args:
        with open(path) as f:
            objs += [line.strip() for line in f if line.strip()]
    mapped = {}
    for o in objs:
        src = source_of(o)
        if not src or src.split("/")[0] not in rank:
            sys.exit("check-calls: %s: not an object of a library source in %s" % (o, order))
        if not os.path.exists(o):
            sys.exit("check-calls: %s: missing (build the library first)" % o)
        mapped[o] = src
    syms = read_symbols(objs)

    where = {}  # symbol -> source that defines it
    for o, (defined, _) in syms.items():
        for s in defined:
            where.setdefault(s, mapped[o])

    bad = 0
    edges, example, nodes, ncalls = {}, {}, set(), 0
    for o in sorted(objs, key=lambda o: mapped[o]):
        src = mapped[o]
        folder, layer = os.path.dirname(src), src.split("/")[0]
        nodes.add(folder)
        for s in sorted(syms[o][1]):
            dsrc = where.get(s)
            if not dsrc:
                continue  # a system library's
            dfolder, dlayer = os.path.dirname(dsrc), dsrc.split("/")[0]
            if dfolder == folder:
                continue
            ncalls += 1
            if rank[dlayer] > rank[layer]:
                print("check-calls: %s (%s) uses %s, defined in %s (%s is above %s)"
                      % (src, layer, s, dsrc, dlayer, layer))
                bad = 1
            edges.setdefault(folder, set()).add(dfolder)
            example.setdefault((folder, dfolder), "%s uses %s (%s)" % (src, s, dsrc))

    for comp in cycles(edges, nodes):
        print("check-calls: a circle of calls spans the folders %s:" % ", ".join(comp))
        for a in comp:
            for b in sorted(edges.get(a, ())):
                if b in comp:
                    print("check-calls:   %s -> %s: %s" % (a, b, example[(a, b)]))
        bad = 1

    if not bad:
        print("check-calls: %d objects in %d folders, %d calls between folders: none points up a "
              "layer (%s, bottom up), no circle spans folders"
              % (len(objs), len(nodes), ncalls, " ".join(order)))
    return bad


if __name__ == "__main__":
    sys.exit(main())
