"""The torch.distributed backend "hcomm".

    import torch.distributed as dist
    import hcomm.torch                     # registers the backend
    dist.init_process_group("hcomm", init_method="env://", rank=r, world_size=n)

The process group (hcomm._torch_backend.ProcessGroupHcomm, a C++
c10d::ProcessGroup) joins hcomm through the store torch passes it: rank 0
calls hcomm_bootstrap_address() and sets "hcomm/bootstrap" and "hcomm/key"
there, every rank gets them and calls hcomm_init_rank(). If hcomm is already
initialized in the process (hcomm.init()), the group uses that world. It
implements allreduce (every ReduceOp: SUM, AVG, PRODUCT, MIN, MAX natively;
BAND, BOR, BXOR as an allgather and a local reduction; PREMUL_SUM),
allreduce_coalesced, broadcast, reduce, allgather, _allgather_base, gather,
scatter, reduce_scatter, _reduce_scatter_base, alltoall, alltoall_base,
barrier, send and recv, on CPU tensors, with Works and futures.
Groups may be of the whole world or of a subset of its ranks (new_group(ranks):
the members make theirs with hcomm_comm_create_group, the others take no part).
"""
import torch.distributed as _dist

from . import _hcomm  # noqa: F401  (the shared lock and library holds)
from ._torch_backend import ProcessGroupHcomm, create  # noqa: F401

BACKEND = "hcomm"

if BACKEND.upper() not in _dist.Backend._plugins:
    _dist.Backend.register_backend(BACKEND, create)
