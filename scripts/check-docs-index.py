#!/usr/bin/env python3
"""check-docs-index.py --root ROOT [FILE...]: every path the index pages
name exists in the tree (ctest docs_index; tests/README.md).

A path is a `backquoted` word with a slash in it or a file name's ending
(.c, .h, .md, ...); a `*` in it is a glob that must match at least one
file (without a slash: a file name anywhere in the tree). Words with
spaces, quoted include names, options (-x) and variables ($X, HCOMM_*) are
not paths. FILE defaults to docs/README.md and tests/README.md under ROOT.
Prints each missing path with its file and line; exits 1 if any is missing
or a file names no path at all (a page the parser cannot read proves
nothing), else 0.
"""
import argparse
import glob
import os
import re
import sys

ENDINGS = (".c", ".h", ".cpp", ".hpp", ".py", ".sh", ".md", ".txt", ".cmake", ".map", ".in",
           ".toml", ".json")
WORD = re.compile(r"`([^`\s]+)`")


def is_path(word):
    if word.startswith(("-", "$", '"', "HCOMM_")) or "=" in word or "(" in word:
        return False
    return "/" in word or word.endswith(ENDINGS)


def check(root, page):
    missing, named = [], 0
    with open(page, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            for word in WORD.findall(line):
                if not is_path(word):
                    continue
                named += 1
                path = os.path.join(root, word.rstrip("/"))
                if "*" in word and "/" not in word:  # a name pattern: anywhere in the tree
                    path = os.path.join(root, "**", word)
                found = glob.glob(path, recursive=True) if "*" in word else os.path.exists(path)
                if not found:
                    missing.append(f"{page}:{lineno}: `{word}` is not in {root}")
    return named, missing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("pages", nargs="*")
    a = ap.parse_args()
    pages = a.pages or [os.path.join(a.root, p) for p in ("docs/README.md", "tests/README.md")]
    bad = False
    for page in pages:
        if not os.path.exists(page):
            print(f"check-docs-index: {page} does not exist")
            bad = True
            continue
        named, missing = check(a.root, page)
        for m in missing:
            print(f"check-docs-index: {m}")
        if named == 0:
            print(f"check-docs-index: {page} names no path")
        bad = bad or bool(missing) or named == 0
        print(f"check-docs-index: {page}: {named} paths, {len(missing)} missing")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
