"""The torch.distributed backend "hcomm" (torch 2.11 to 2.15).

    import torch.distributed as dist
    dist.init_process_group("hcomm")                 # CPU tensors (and CUDA: see below)
    dist.init_process_group("cpu:hcomm,cuda:nccl")   # hcomm for one device, another for the other

torch registers the backend itself through hcomm's entry points (torch 2.5
and later load them at `import torch`); `import hcomm.torch` does it
explicitly, loads the C++ backend and fails here, saying why, when the
installed torch is out of the supported range or the backend was not built
for it. A group (hcomm._torch_backend.BackendHcomm, a c10d::Backend) joins
hcomm through the store torch passes it: rank 0 calls
hcomm_bootstrap_address() and sets "hcomm/bootstrap" and "hcomm/key" there,
every rank gets them and calls hcomm_init_rank(); no HCOMM_* variable is
needed under torchrun, Slurm or env://. If hcomm is already initialized in
the process (hcomm.init()), groups use that world. docs/python.md lists
the operations; CUDA tensors are refused with a message until libhcomm has
GPU memory support.
"""
import torch as _torch
import torch.distributed as _dist

import hcomm_autoload as _autoload

_why = _autoload.check(_torch.__version__)
if _why:
    raise ImportError(f"hcomm.torch: {_why}")
try:
    from . import _torch_backend
except ImportError as _e:
    raise ImportError(
        "hcomm.torch: the torch backend (hcomm._torch_backend) is not built: reinstall with torch "
        "installed (pip install --no-build-isolation ./python; its output says why it was left "
        f"out): {_e}") from _e
if _torch_backend.TORCH_BUILT_WITH != _autoload.parse(_torch.__version__):
    _b = ".".join(map(str, _torch_backend.TORCH_BUILT_WITH))
    raise ImportError(f"hcomm.torch: hcomm._torch_backend was built for torch {_b}, this is torch "
                      f"{_torch.__version__}: reinstall hcomm (pip install --no-build-isolation ./python)")

BackendHcomm = _torch_backend.BackendHcomm
Options = _torch_backend.Options
BACKEND = _autoload.BACKEND


def create(store, rank, size, timeout, name=""):
    """A group of hcomm on a store (what torch's creator does; for tests and
    for groups made by hand): a BackendHcomm."""
    return _torch_backend.create(store, rank, size, timeout, name)


def _create(dist_opts, options):
    """torch.distributed's creator (extended API): DistributedBackendOptions
    and the pg_options given (an hcomm.torch.Options or None)."""
    if options is not None and not isinstance(options, Options):
        raise TypeError(f"hcomm: pg_options must be hcomm.torch.Options, not {type(options).__name__}")
    timeout = dist_opts.timeout
    if options is not None and options.timeout is not None:
        timeout = options.timeout
    return _torch_backend.create(dist_opts.store, dist_opts.group_rank, dist_opts.group_size, timeout,
                                 dist_opts.group_id)


_autoload.register(_create)


def shrink_group(group=None, pg_options=None):
    """The survivors of a failure go on: a new process group of the members of
    `group` (default: the default group) that are alive, agreed among them.

    Every surviving member calls it (the dead need not); it revokes `group`
    (every member's pending operations on it end with ERR_REVOKED), runs
    hcomm_comm_shrink, then hands the failed ranks it agreed on to
    torch.distributed.shrink_group(), which destroys `group` and returns the
    new group (the new default group when `group` was the default; group
    ranks renumbered in the old order). Unlike torch's shrink_group, the
    caller need not know who failed.

        try:
            dist.all_reduce(grad)
        except dist.DistBackendError as e:     # names the failed rank
            pg = hcomm.torch.shrink_group()    # the survivors, agreed
            dist.all_reduce(grad)              # on the new default group

    Raises RuntimeError (DistBackendError) when the agreement fails (no
    agreement within HCOMM_TIMEOUT; a member that fails during the shrink
    is left out, one that fails right after it is an ordinary failure of the
    new group: shrink that one). A group shrinks once; shrink the new one
    after the next failure.
    """
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(_torch.device("cpu"))
    if not isinstance(backend, BackendHcomm):
        raise TypeError(f"hcomm.torch.shrink_group: the group's CPU backend is {backend.name()}, not hcomm")
    excluded = backend._agree_shrink()
    if excluded:
        return _dist.shrink_group(excluded, group=group, pg_options=pg_options)
    # Nobody failed (a revoke or abort() of a live member): torch's
    # shrink_group refuses an empty list, so its own steps, around the
    # same new group of every member.
    c10d = _dist.distributed_c10d
    info = c10d._prepare_shrink_target_group(group)
    new_backend = backend.shrink([], 0, pg_options)
    info["pg_options_override"] = pg_options
    return c10d._finalize_shrunk_group(info, set(), new_backend)
