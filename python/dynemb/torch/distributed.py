"""Communicators over a torch.distributed process group, for the sharded collections.

On CUDA the tables talk through NCCL (dynemb's own communicator, on the caller's stream); rank
0's NCCL id reaches the other ranks through torch.distributed's store, so whatever started the
process group (torchrun, env://, tcp://) starts dynemb too. On the CPU the collectives are the
process group's own (gloo under torchrun) called back from the compiled module: no MPI, no
second rendezvous. docs/python.md ("Sharded collections") says why.
"""

from typing import Dict, Tuple

import torch

from .. import _C


def _dist():
    import torch.distributed as dist

    if not dist.is_available():
        raise _C.NotAvailable("pg: this PyTorch has no torch.distributed")
    if not dist.is_initialized():
        raise _C.InvalidArgument(
            "pg: torch.distributed is not initialized; call torch.distributed.init_process_group "
            "(torchrun sets up its environment) before building a sharded collection"
        )
    return dist


def _resolve(pg):
    """The process group itself (the default group for torch.distributed.group.WORLD)."""
    dist = _dist()
    if pg is None or pg is dist.group.WORLD:
        return dist.distributed_c10d._get_default_group()
    return pg


class ProcessGroupCollectives:
    """The collectives dynemb's host communicator calls (python_communicator): byte buffers
    arrive as DLPack capsules over dynemb's memory and move with the group's all_to_all_single,
    all_gather, broadcast and barrier (gloo on the CPU)."""

    def __init__(self, pg):
        dist = _dist()
        self._dist, self.pg = dist, pg
        self.world = dist.get_world_size(pg)

    def all_to_all(self, send, send_counts, recv, recv_counts):
        s, r = torch.from_dlpack(send), torch.from_dlpack(recv)
        self._dist.all_to_all_single(r, s, output_split_sizes=list(recv_counts),
                                     input_split_sizes=list(send_counts), group=self.pg)

    def all_gather(self, send, recv):
        s, r = torch.from_dlpack(send), torch.from_dlpack(recv)
        self._dist.all_gather(list(r.chunk(self.world)) if s.numel() else
                              [r[:0] for _ in range(self.world)], s, group=self.pg)

    def broadcast(self, buffer, root):
        b = torch.from_dlpack(buffer)
        src = self._dist.get_global_rank(self.pg, root) if hasattr(self._dist, "get_global_rank") \
            else self._dist.distributed_c10d._get_global_rank(self.pg, root)
        self._dist.broadcast(b, src, group=self.pg)

    def barrier(self):
        self._dist.barrier(group=self.pg)


# One communicator per (process group, device), shared by every sharded collection on them; the
# NCCL rendezvous made so far per set of member ranks number their keys in the store.
_communicators: Dict[Tuple[int, str], Tuple[object, "_C.Communicator"]] = {}
_rendezvous: Dict[str, int] = {}


def communicator_for(pg, device: torch.device) -> "_C.Communicator":
    """dynemb's communicator over the ranks of `pg` (None: the default group) for tables on
    `device`: NCCL on CUDA (bootstrapped through the default store), the group's own
    collectives on the CPU. Collective the first time on a (group, device)."""
    dist = _dist()
    group = _resolve(pg)
    key = (id(group), str(device))
    if key in _communicators:
        return _communicators[key][1]
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    if rank < 0:
        raise _C.InvalidArgument(f"pg: this process (global rank {dist.get_rank()}) is not a "
                                 "member of the process group")
    if device.type == "cuda":
        if not _C.nccl_available():
            raise _C.NotAvailable("pg with a CUDA device: this dynemb module was built without NCCL")
        store = dist.distributed_c10d._get_default_store()
        ranks = dist.get_process_group_ranks(group) if hasattr(dist, "get_process_group_ranks") \
            else dist.distributed_c10d._pg_group_ranks[group].keys()
        members = "-".join(map(str, sorted(ranks)))
        # Numbered per member set: the members make their communicators in the same order, so
        # the n-th rendezvous of a set of ranks has a key of its own (never an old id).
        n = _rendezvous.get(members, 0)
        _rendezvous[members] = n + 1
        prefix = f"dynemb/nccl/{members}/{n}/"
        index = device.index if device.index is not None else torch.cuda.current_device()
        comm = _C.nccl_communicator(rank, world, store.set, store.get, prefix, index)
    else:
        comm = _C.python_communicator(rank, world, ProcessGroupCollectives(group))
    _communicators[key] = (group, comm)
    return comm
