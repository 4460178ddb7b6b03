"""hcomm: point-to-point messages and collectives for distributed training.

    import numpy as np, hcomm
    world = hcomm.init()                  # the job of the environment (hcommrun, torchrun, Slurm...)
    x = np.full(1024, world.rank, dtype=np.float32)
    world.allreduce(x)                    # in place, no copy
    req = world.iallgather(x, out)        # non-blocking; req.wait() returns out
    hcomm.finalize()

Buffers are numpy arrays (any object with the buffer protocol), torch CPU
tensors or DLPack producers in host memory, used where they lie: never
copied, so they must be contiguous. A non-blocking call's Request keeps its
buffers alive until it completes. allreduce([a, b, ...]) reduces a list of
buffers in place in one hcomm group (launched together, small ones fused).
Every failure of the library raises hcomm.Error (.status, .status_name,
.message = hcomm_last_error()); arguments hcomm cannot take (a
non-contiguous array, sizes that do not match) raise TypeError/ValueError
before anything is sent. See docs/python.md.

`import hcomm.torch` registers the torch.distributed backend "hcomm" (an
installed hcomm is also found by torch itself, through its entry points).
"""
import atexit as _atexit

from . import _hcomm
from ._hcomm import (  # noqa: F401  (the public names)
    Comm,
    Error,
    Request,
    bootstrap_address,
    dtype_of,
    dtype_size,
    initialized,
    last_error,
    stats_dump,
    strerror,
    version,
    world,
    INT8, UINT8, INT32, UINT32, INT64, UINT64, FLOAT16, BFLOAT16, FLOAT32, FLOAT64,
    SUM, PROD, MAX, MIN, AVG, UNDEFINED, ANY_SOURCE,
    OK, IN_PROGRESS, ERR_INVALID, ERR_TIMEOUT, ERR_PEER_FAILED, ERR_NO_MEMORY,
    ERR_NOT_INITIALIZED, ERR_ALREADY_INITIALIZED, ERR_UNSUPPORTED, ERR_TRUNCATED, ERR_IO,
    ERR_BOOTSTRAP, ERR_NO_DEVICE, ERR_AGAIN, ERR_ABORTED, ERR_INTERNAL, ERR_REVOKED,
)

# __version__: the version of the library this module runs on (hcomm.version()
# is "hcomm 0.1.0 (drivers: ...)"), the project's (CMakeLists.txt) as is the
# package's metadata (setup.py); set below

#: hcomm dtype codes by name (dtype= keyword of every call: read the bytes as this type).
dtypes = {"int8": INT8, "uint8": UINT8, "int32": INT32, "uint32": UINT32, "int64": INT64,
          "uint64": UINT64, "float16": FLOAT16, "bfloat16": BFLOAT16, "float32": FLOAT32,
          "float64": FLOAT64}
#: reduction ops by name
ops = {"sum": SUM, "prod": PROD, "max": MAX, "min": MIN, "avg": AVG}
#: every hcomm_status_t by name ("ERR_REVOKED": -15), as hcomm._hcomm defines
#: them from include/hcomm.h's HCOMM_STATUS_MAP (tests/python/test_status.py
#: checks that this list and the header agree)
statuses = {n: v for n, v in vars(_hcomm).items()
            if isinstance(v, int) and (n in ("OK", "IN_PROGRESS") or n.startswith("ERR_"))}

STORE_PREFIX = "hcomm"


def _text(v):
    return v.decode() if isinstance(v, (bytes, bytearray)) else str(v)


__version__ = _text(version()).split()[1]


def init(store=None, rank=None, size=None, *, bootstrap=None, key=None, local_rank=-1,
         local_size=-1, prefix=STORE_PREFIX):
    """Joins a job and returns the world communicator.

    init()                              the job the environment describes (hcommrun's
                                        HCOMM_*, torchrun's RANK/WORLD_SIZE/MASTER_*...)
    init(store, rank, size)             through a key-value store (anything with
                                        set(key, value) and get(key) that waits, e.g. a
                                        torch.distributed.TCPStore/FileStore): rank 0 calls
                                        hcomm_bootstrap_address() and sets
                                        "<prefix>/bootstrap" and "<prefix>/key"; every rank
                                        gets them and calls hcomm_init_rank()
    init(rank=r, size=n, bootstrap=url, key=k)
                                        hcomm_init_rank() with an address and key you
                                        handed out yourself (see bootstrap_address())
    local_rank/local_size: this rank among those of its node (-1: hcomm finds out).
    """
    if store is None and bootstrap is None:
        if rank is not None or size is not None:
            raise ValueError("hcomm.init: rank and size need a store or a bootstrap address")
        _hcomm.init_env()
        return world()
    if rank is None or size is None:
        raise ValueError("hcomm.init: rank and size are required with a store or bootstrap")
    if store is not None:
        if bootstrap is not None:
            raise ValueError("hcomm.init: pass a store or a bootstrap address, not both")
        if rank == 0:
            bootstrap, key = bootstrap_address()
            store.set(prefix + "/bootstrap", bootstrap)
            store.set(prefix + "/key", key)
        else:
            bootstrap = _text(store.get(prefix + "/bootstrap"))
            key = _text(store.get(prefix + "/key"))
    _hcomm.init_rank(int(rank), int(size), bootstrap, key, int(local_rank), int(local_size))
    return world()


def finalize():
    """Ends hcomm.init()'s hold on the library (the last hold, with torch process
    groups that use it, calls hcomm_finalize). Outstanding requests are cancelled
    and communicators become unusable."""
    _hcomm.finalize()


def _at_exit():
    if _hcomm._holds()[1]:
        try:
            _hcomm.finalize()
        except Error:
            pass


_atexit.register(_at_exit)


def rank():
    """This process's rank in the world."""
    return world().rank


def size():
    """The number of ranks of the world."""
    return world().size


def _world_call(name):
    def call(*args, **kw):
        return getattr(world(), name)(*args, **kw)
    call.__name__ = name
    call.__doc__ = f"world().{name}(...): " + (getattr(Comm, name).__doc__ or "")
    return call


_COLLS = ("allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "alltoall",
          "barrier", "gather", "scatter", "allgatherv", "reduce_scatterv", "alltoallv",
          "send", "recv", "recv_any")
for _n in _COLLS:
    globals()[_n] = _world_call(_n)
    globals()["i" + _n] = _world_call("i" + _n)
del _n


def wait_all(requests):
    """Waits for every request; returns their results in order (the first
    failure is raised after all have been waited for)."""
    results, first = [], None
    for r in requests:
        try:
            results.append(r.wait())
        except Error as e:
            results.append(None)
            first = first or e
    if first is not None:
        raise first
    return results
