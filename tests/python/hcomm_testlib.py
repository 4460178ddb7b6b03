"""What the python tests share: the modules they cannot run without. A test
imports numpy and hcomm from here; either missing, it exits 77 (SKIP) and
says which.

    from hcomm_testlib import np, hcomm
"""
import importlib
import sys


def need(name, why):
    """The module name, or exit 77 (SKIP: why: the ImportError)."""
    try:
        return importlib.import_module(name)
    except ImportError as e:
        print(f"SKIP: {why}: {e}")
        sys.exit(77)


np = need("numpy", "numpy unavailable")
hcomm = need("hcomm", "the hcomm module is not built")
