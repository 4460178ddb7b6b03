"""The Python module's statuses against include/hcomm.h, so that they cannot
drift apart: every X(NAME, VALUE, "text") of HCOMM_STATUS_MAP must be

  - hcomm.NAME == VALUE (a public name of the package, not only of
    hcomm._hcomm: hcomm/__init__.py lists its imports by hand),
  - hcomm.statuses["NAME"] == VALUE, and nothing else in hcomm.statuses,
  - hcomm.strerror(VALUE) == "text" (the library this module loaded is the
    header's),

and hcomm.Error's .status_name for a status the library raises is its name.

    test_status.py PATH/TO/include/hcomm.h
Exit 0: pass, 1: a check failed, 77: the module is not built.
"""
import re
import sys

from hcomm_testlib import hcomm

ENTRY = re.compile(r'X\(\s*([A-Z_]+)\s*,\s*(-?\d+)\s*,\s*"((?:[^"\\]|\\.)*)"\s*\)')


def header_statuses(path):
    """[(name, value, text)] of HCOMM_STATUS_MAP in the header at path."""
    text = open(path, encoding="utf-8").read()
    m = re.search(r"#define HCOMM_STATUS_MAP\(X\)(.*?)\n\s*\n", text, re.S)
    if not m:
        raise SystemExit(f"FAIL: no HCOMM_STATUS_MAP(X) in {path}")
    body = m.group(1).replace("\\\n", " ")
    found = [(n, int(v), t) for n, v, t in ENTRY.findall(body)]
    # every X( of the map was parsed (a new entry in another shape must not be skipped)
    if len(found) != body.count("X("):
        raise SystemExit(f"FAIL: parsed {len(found)} of {body.count('X(')} entries of HCOMM_STATUS_MAP")
    return found


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    want = header_statuses(sys.argv[1])
    fails = []
    if len(want) < 16 or ("ERR_REVOKED", -15) not in [(n, v) for n, v, _ in want]:
        fails.append(f"the header's map looks wrong: {want}")
    for name, value, text in want:
        got = getattr(hcomm, name, None)
        if got != value:
            fails.append(f"hcomm.{name} is {got!r}, the header says {value}")
        if hcomm.statuses.get(name) != value:
            fails.append(f"hcomm.statuses[{name!r}] is {hcomm.statuses.get(name)!r}, want {value}")
        if hcomm.strerror(value) != text:
            fails.append(f"hcomm.strerror({value}) is {hcomm.strerror(value)!r}, the header says {text!r}")
    extra = set(hcomm.statuses) - {n for n, _, _ in want}
    if extra:
        fails.append(f"hcomm.statuses has names the header lacks: {sorted(extra)}")
    # .status_name comes from the same map (hcomm_capi.h's hcpy_status_name)
    try:
        hcomm.world()
        fails.append("hcomm.world() before init did not raise")
    except hcomm.Error as e:
        if e.status_name != "ERR_NOT_INITIALIZED" or e.status != hcomm.ERR_NOT_INITIALIZED:
            fails.append(f"Error of world() before init: {e.status} {e.status_name}")
    for f in fails:
        print("FAIL:", f)
    print(f"{len(want)} statuses of the header checked, {len(fails)} failures")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
