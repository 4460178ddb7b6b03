#!/usr/bin/env python3
"""Lists the C functions longer than a limit (docs/architecture.md: functions
under ~80 lines). A definition is a line at column 0 that opens a parameter
list, whose body's '{' stands alone at column 0 (the repo's .clang-format);
the body ends at the '}' that matches it (braces in strings, characters and
comments are skipped). Length: the signature's first line to the closing
brace. Report only; exits 0.

usage: long-functions.py [--max N] [PATH...]   (default: 80, the library's folders)
"""
import os
import re
import sys

LIB_DIRS = ["api", "base", "coll", "core", "drv", "mem", "topo"]
SIG = re.compile(r"^(?:__attribute__\(\(.*?\)\)\s*)?[A-Za-z_][\w \*]*?\b([A-Za-z_]\w*)\s*\(")


def strip_code(line, state):
    """The line without strings, character literals and comments; state
    carries an open block comment across lines."""
    out, i, n = [], 0, len(line)
    while i < n:
        if state["comment"]:
            end = line.find("*/", i)
            if end < 0:
                return "".join(out)
            state["comment"], i = False, end + 2
            continue
        c = line[i]
        if line.startswith("/*", i):
            state["comment"], i = True, i + 2
        elif line.startswith("//", i):
            break
        elif c in "\"'":
            j = i + 1
            while j < n and line[j] != c:
                j += 2 if line[j] == "\\" else 1
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(path):
    """Yields (name, first line, length) of each function defined in path."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    state = {"comment": False}
    code = [strip_code(l, state) for l in lines]
    i = 0
    while i < len(lines):
        if code[i].rstrip() == "{" and lines[i].startswith("{"):
            start = i - 1  # the signature: back to its first line at column 0
            while start > 0 and not SIG.match(lines[start]):
                if lines[start].strip() == "" or lines[start].rstrip().endswith(";"):
                    start = -1
                    break
                start -= 1
            depth, j = 0, i
            while j < len(lines):
                depth += code[j].count("{") - code[j].count("}")
                if depth == 0:
                    break
                j += 1
            m = SIG.match(lines[start]) if start >= 0 else None
            if m:
                yield m.group(1), start + 1, j - start + 1
            i = j + 1
            continue
        i += 1


def main(argv):
    limit, paths = 80, []
    it = iter(argv)
    for a in it:
        if a == "--max":
            limit = int(next(it))
        else:
            paths.append(a)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not paths:
        paths = [os.path.join(root, d) for d in LIB_DIRS]
    files = []
    for p in paths:
        if os.path.isdir(p):
            for d, _, names in os.walk(p):
                files += [os.path.join(d, n) for n in names if n.endswith((".c", ".h"))]
        else:
            files.append(p)
    rows = []
    for f in sorted(files):
        for name, line, n in functions(f):
            if n > limit:
                rows.append((n, os.path.relpath(f, root), line, name))
    for n, f, line, name in sorted(rows, reverse=True):
        print(f"{n:5d} {f}:{line} {name}", flush=True)
    print(f"{len(rows)} functions over {limit} lines", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
