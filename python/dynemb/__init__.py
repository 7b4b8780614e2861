"""dynemb: dynamic embedding tables for PyTorch, with NVIDIA dynamicemb's names and defaults.

The compiled part (dynemb._C) exchanges tensors through DLPack and links no libtorch, so one
build serves every PyTorch version; `dynemb.torch` holds the modules.
"""

try:
    # PyTorch before the compiled module, when it is installed: the shared libraries both use
    # (NCCL, the CUDA runtime: same sonames) are then PyTorch's own copies, loaded the way it
    # expects. Imported the other way round, a process aborted under PyTorch 2.11 ("free():
    # invalid pointer") on the GPU machine.
    import torch  # noqa: F401
except ImportError:
    pass

from . import _C  # noqa: E402
from ._C import (
    CheckpointError,
    CudaError,
    Error,
    InsertRefused,
    InvalidArgument,
    NotAvailable,
    OutOfMemory,
    StateError,
    Storage,
    StorageError,
    HostStorage,
    RocksDbStorage,
    RedisStorage,
    embedding_row_dim,
)
from .checkpoint import (
    DeltaDumpResult,
    DynamicEmbDump,
    DynamicEmbLoad,
    get_score,
    incremental_dump,
    set_score,
)
from .options import (
    DynamicEmbCheckMode,
    DynamicEmbEvictStrategy,
    DynamicEmbInitializerArgs,
    DynamicEmbInitializerMode,
    DynamicEmbPoolingMode,
    DynamicEmbScoreStrategy,
    DynamicEmbTableOptions,
    EmbOptimType,
    EvictedItemMode,
    FrequencyAdmissionStrategy,
)

DynamicEmbOptimType = EmbOptimType

__all__ = [
    "CheckpointError",
    "CudaError",
    "DeltaDumpResult",
    "DynamicEmbCheckMode",
    "DynamicEmbDump",
    "DynamicEmbEvictStrategy",
    "DynamicEmbInitializerArgs",
    "DynamicEmbInitializerMode",
    "DynamicEmbLoad",
    "DynamicEmbOptimType",
    "DynamicEmbPoolingMode",
    "DynamicEmbScoreStrategy",
    "DynamicEmbTableOptions",
    "EmbOptimType",
    "Error",
    "EvictedItemMode",
    "FrequencyAdmissionStrategy",
    "InsertRefused",
    "InvalidArgument",
    "NotAvailable",
    "OutOfMemory",
    "StateError",
    "Storage",
    "StorageError",
    "HostStorage",
    "RocksDbStorage",
    "RedisStorage",
    "embedding_row_dim",
    "get_score",
    "incremental_dump",
    "set_score",
]
