"""WholeMemory from PyTorch: float tensors spread over the processes of one node (one process
per GPU), gathered and scattered by row index, and an embedding trained through them
(docs/wholememory.md). Tensors cross through DLPack; a call runs where its indices are (CPU
threads, or kernels on the memory's GPU).

    group = Group.socket("job-name", rank, world_size)   # or Group.local()
    t = WholeTensor(group, [rows, cols], type="chunked", location="device")
    rows = t.gather(torch.tensor([...], device="cuda"))
"""

from typing import List, Optional, Sequence

import torch

from . import _C
from .options import optimizer_options

Group = _C.WholeMemoryGroup


class WholeTensor:
    """A float32 tensor of `shape` (1-D or 2-D, rows partitioned over the group's ranks).
    type: "continuous", "chunked" or "distributed"; location: "host" or "device". Creating it,
    and gather / scatter of distributed memory, are collective."""

    def __init__(self, group: Group, shape: Sequence[int], type: str = "continuous",
                 location: str = "host", device: int = -1):
        self._t = _C.WholeTensor(group, list(shape), type, location, device)

    @property
    def shape(self) -> List[int]:
        return self._t.shape

    @property
    def local_rows(self) -> range:
        """The rows this rank holds."""
        return range(self._t.local_first_row, self._t.local_first_row + self._t.local_rows)

    def gather(self, indices: torch.Tensor) -> torch.Tensor:
        """Rows `indices` (int64, on the CPU or the memory's GPU) as a new tensor there."""
        return torch.from_dlpack(self._t.gather(indices.contiguous()))

    def scatter(self, values: torch.Tensor, indices: torch.Tensor) -> None:
        """Rows `indices` = `values` (one row per index)."""
        self._t.scatter(values.contiguous(), indices.contiguous())

    def load_from_files(self, files: Sequence[str]) -> None:
        """Collective: the rows are the concatenation of `files` (raw float32)."""
        self._t.load_from_files(list(files))

    def store_to_file(self, path: str) -> None:
        """Collective: every row, in order, to one raw file."""
        self._t.store_to_file(path)

    def store_parts(self, prefix: str) -> List[str]:
        """Collective: a file per rank; returns their names in rank order."""
        return self._t.store_parts(prefix)


class WholeEmbedding:
    """An embedding of `rows` dense ids, `dim` floats each, with a fused sparse optimizer
    (fused_params as dynemb's tables take them: sgd, adam, adagrad, rowwise_adagrad, rmsprop)
    and rows drawn uniformly in [low, high) from `seed` (the rows an int64 dynemb table draws
    for those keys). `cache_ratio` > 0 gives each rank a cache of that share of the rows on
    `cache_on` ("cuda" or "cpu")."""

    def __init__(self, group: Group, rows: int, dim: int, fused_params: Optional[dict] = None,
                 low: float = -0.05, high: float = 0.05, seed: int = 0,
                 type: str = "continuous", location: str = "host", device: int = -1,
                 cache_ratio: float = 0.0, cache_on: str = "cuda"):
        init = _C.InitializerOptions()
        init.kind = _C.InitializerKind.UNIFORM
        init.low, init.high, init.seed = float(low), float(high), int(seed)
        self._e = _C.WholeEmbedding(group, rows, dim, optimizer_options(fused_params), init,
                                    type, location, device, cache_ratio, cache_on)
        self.dim = dim

    def lookup(self, indices: torch.Tensor) -> torch.Tensor:
        """The rows of `indices` ([n, dim], where the indices are)."""
        return torch.from_dlpack(self._e.lookup(indices.contiguous()))

    def apply_gradients(self, indices: torch.Tensor, grads: torch.Tensor) -> int:
        """Collective: one optimizer step with gradient row i for id indices[i] (every rank's
        gradients of an id summed). Returns the rows this rank updated."""
        return self._e.apply_gradients(indices.contiguous(), grads.contiguous())

    def cache_stats(self) -> dict:
        return self._e.cache_stats()

    def invalidate_cache(self) -> None:
        self._e.invalidate_cache()
