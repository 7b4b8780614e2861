"""PyTorch modules over dynamic tables: DynamicEmbedding, DynamicEmbeddingBag and the keyed
collections. Lookups run in the compiled module on the caller's current stream; backward
applies the fused optimizer to the rows a training forward touched (there is no dense
gradient: the tables are not nn.Parameters and take no part in a torch.optim optimizer).
"""

import contextlib
import copy
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import nn

from .. import _C
from ..options import (
    DynamicEmbPoolingMode,
    DynamicEmbTableOptions,
    caching_options,
    storage_for,
    to_embedding_options,
)
from .jagged import JaggedTensor, KeyedJaggedTensor, KeyedTensor, _offsets_from_lengths


@dataclass
class EmbeddingConfig:
    """A sequence table (TorchRec's EmbeddingConfig fields): its name, dim, row count (sizes
    max_capacity and the default UNIFORM bounds) and the features that read it."""

    name: str
    embedding_dim: int
    num_embeddings: int = 0
    feature_names: List[str] = field(default_factory=list)


@dataclass
class EmbeddingBagConfig(EmbeddingConfig):
    """A pooled table (TorchRec's EmbeddingBagConfig fields); pooling "SUM" or "MEAN"."""

    pooling: Union[str, DynamicEmbPoolingMode] = "SUM"


def _pooling_mode(value, where: str) -> "_C.PoolingMode":
    name = getattr(value, "name", value)
    name = str(name).upper()
    modes = {"SUM": _C.PoolingMode.SUM, "MEAN": _C.PoolingMode.MEAN, "NONE": _C.PoolingMode.NONE}
    if name not in modes:
        raise _C.InvalidArgument(f"{where}: pooling / mode = {value!r}, must be SUM, MEAN or NONE")
    return modes[name]


class _Table:
    """One compiled table, its name and the features it serves."""

    def __init__(self, name, dim, num_embeddings, features, mode, handle, options,
                 compiled_options=None):
        self.name, self.dim, self.num_embeddings = name, dim, num_embeddings
        self.features, self.mode, self.handle, self.options = features, mode, handle, options
        # Grouped or sharded modules: the table's compiled options; it runs in a _TableGroup.
        self.compiled_options = compiled_options
        self.group: Optional["_TableGroup"] = None
        self.index = 0  # its position in its group
        self.store = None  # its lower tier (caching / external_storage), if any


class _TableGroup:
    """Tables run together: one compiled ShardedCollection (one exchange per step for all of
    them), one EmbeddingCollection (one dedup, pooling and backward launch), or one table alone
    (_SingleTable). The handle's forward(batches, training, out, stream) fills every table's
    rows into one output and returns the training forward's number."""

    def __init__(self, tables, handle):
        self.tables, self.handle = tables, handle
        self.training = tables[0].options.training


class _SingleTable:
    """One compiled Embedding behind the group interface (a table that cannot be grouped:
    caching, admission)."""

    def __init__(self, handle):
        self.handle = handle

    def forward(self, batches, training, out, stream):
        ids, offsets, weights, mode = batches[0]
        self.handle.forward(ids, offsets, weights, mode, training, out, stream)
        return self.handle.generation if training else 0

    def backward(self, grad, generation, stream):
        self.handle.backward(grad, generation, stream)


class _Lookup(torch.autograd.Function):
    """Forward: a step's lookups (training), returned as its output pieces (no view or copy
    between them and the caller, so autograd hands backward each piece's gradient as is).
    Backward: the fused optimizers, each table (or group of tables) given one gradient."""

    @staticmethod
    def forward(ctx, anchor, step):
        pieces = step.forward(training=True)
        ctx.step = step
        return tuple(pieces)

    @staticmethod
    def backward(ctx, *grads):
        ctx.step.backward(grads)
        return None, None


_OUTPUT_DTYPES = {
    _C.ValueType.FLOAT32: torch.float32,
    _C.ValueType.FLOAT16: torch.float16,
    _C.ValueType.BFLOAT16: torch.bfloat16,
}


def _out_dtype(table) -> torch.dtype:
    """What a table's lookups return and its backward takes (its options' output_dtype)."""
    return _OUTPUT_DTYPES[table.compiled_options.output_type]


def _gradient(grads, shapes, device, dtype=torch.float32) -> torch.Tensor:
    """One `dtype` tensor of pieces' gradients, one after the other (zeros for a piece without
    one): the gradients as they are when they already lie so in one tensor (one gradient, or
    the pieces of one buffer, as a loss over the pieces concatenated or a split gradient gives
    them), else a single cat."""
    if len(grads) == 1 and grads[0] is not None:
        return grads[0].to(dtype).contiguous()
    adjacent = _adjacent(grads, shapes, dtype)
    if adjacent is not None:
        return adjacent
    parts = [g.to(dtype) if g is not None
             else torch.zeros(shape, dtype=dtype, device=device)
             for g, shape in zip(grads, shapes)]
    return torch.cat(parts)


def _adjacent(grads, shapes, dtype=torch.float32) -> Optional[torch.Tensor]:
    """The pieces' gradients as one [rows, dim] view when they are contiguous `dtype` views of
    one tensor lying one after the other in its memory; else None."""
    first = grads[0]
    if first is None or first._base is None or first.dtype != dtype:
        return None
    base, ptr, size, rows = first._base, first.data_ptr(), first.element_size(), 0
    for g, shape in zip(grads, shapes):
        if (g is None or g._base is not base or g.dtype != dtype
                or tuple(g.shape) != tuple(shape) or not g.is_contiguous()
                or g.data_ptr() != ptr + rows * shape[1] * size):
            return None
        rows += shape[0]
    dim = shapes[0][1]
    return base.as_strided((rows, dim), (dim, 1), first.storage_offset())


class _TableStep:
    """A step over per-table calls (table, ids, offsets, weights, rows): separate tables, or
    groups run from per-table batches (sharded). Each table's output is cut into `pieces` (row
    counts per table; None: one piece a table)."""

    def __init__(self, module, calls, pieces=None):
        self.module, self.calls = module, calls
        self.pieces = pieces if pieces is not None else [[c[4]] for c in calls]
        self.generations = None

    def forward(self, training: bool) -> List[torch.Tensor]:
        outs, self.generations = self.module._run_forward(self.calls, training)
        flat = []
        for out, sizes in zip(outs, self.pieces):
            flat.extend(torch.split(out, sizes) if len(sizes) > 1 else (out,))
        return flat

    def backward(self, grads):
        per_table, i = [], 0
        for sizes in self.pieces:
            per_table.append(grads[i:i + len(sizes)])
            i += len(sizes)
        tables = [c[0] for c in self.calls]
        self.module._run_backward(tables, self.pieces, per_table, self.generations)


class _PackedStep:
    """A step of grouped collections, each group's tables given as three tensors (ids,
    offsets rebased per table, weights) and host cuts (EmbeddingCollection.forward_packed).
    launches: per group (group, ids, offsets, weights, id_ranges, bags, mode, rows, pieces);
    the output pieces come group after group, table after table, feature after feature."""

    def __init__(self, module, launches):
        self.module, self.launches = module, launches
        self.generations = None

    def forward(self, training: bool) -> List[torch.Tensor]:
        m = self.module
        flat, self.generations = [], []
        with m._on_device():
            stream = m._stream()
            for group, ids, offsets, weights, id_ranges, bags, mode, rows, pieces in self.launches:
                out = torch.empty((rows, group.tables[0].dim),
                                  dtype=_out_dtype(group.tables[0]), device=m._device)
                g_training = training and group.training
                generation = group.handle.forward_packed(ids, offsets, weights, id_ranges, bags,
                                                         mode, g_training, out, stream)
                self.generations.append(generation)
                flat.extend(torch.split(out, pieces) if len(pieces) > 1 else (out,))
        return flat

    def backward(self, grads):
        m = self.module
        with m._on_device():
            stream = m._stream()
            i = 0
            for launch, generation in zip(self.launches, self.generations):
                group, pieces = launch[0], launch[8]
                g = grads[i:i + len(pieces)]
                i += len(pieces)
                if generation == 0:
                    continue  # a group without training: no step
                dim = group.tables[0].dim
                grad = _gradient(g, [(n, dim) for n in pieces], m._device,
                                 _out_dtype(group.tables[0]))
                group.handle.backward(grad, generation, stream)


class DynamicEmbModule(nn.Module):
    """Base of every module holding dynamic tables (what DynamicEmbDump and friends look for)."""

    def __init__(self, device):
        super().__init__()
        device = torch.device(device if device is not None else "cpu")
        if device.type == "cuda":
            if not _C.cuda_available():
                raise _C.NotAvailable(
                    f"device = {device}: this dynemb module has no CUDA backend or sees no GPU"
                )
            if device.index is None:
                device = torch.device("cuda", torch.cuda.current_device())
        elif device.type != "cpu":
            raise _C.InvalidArgument(f"device = {device}, must be cpu or cuda")
        self._device = device
        self._tables: List[_Table] = []
        # Set when the tables run in groups (group_tables=True, or sharded over a process group).
        self._groups: Optional[List[_TableGroup]] = None
        self._sharded = False
        # Moves with .to() / .cuda(): a moved module is told apart from where its tables live.
        self.register_buffer("_device_anchor", torch.empty(0, device=device), persistent=False)
        # The autograd input of every training lookup (its gradient is never used).
        self._grad_anchor = torch.empty(0, requires_grad=True)

    # --- building --------------------------------------------------------------------------------
    def _add_table(self, name, dim, num_embeddings, features, mode, options, fused_params,
                   world_size: int = 0, grouped: bool = False):
        """Adds a table; sharded (world_size > 0) or grouped, only its options: the rows come
        later from _shard / _group."""
        where = f"{type(self).__name__} table '{name}'"
        if any(t.name == name for t in self._tables):
            raise _C.InvalidArgument(f"{where}: the name is used twice")
        index = self._device.index or 0
        e = to_embedding_options(options, dim, num_embeddings, fused_params, index, where)
        caching = caching_options(options, where)
        if world_size > 0:
            if e.output_type != _C.ValueType.FLOAT32:
                raise _C.NotAvailable(
                    f"{where}: output_dtype = {options.output_dtype!r} with a process group (pg): "
                    "sharded tables exchange float32 outputs for now"
                )
            if options.caching or options.external_storage is not None:
                raise _C.NotAvailable(
                    f"{where}: caching / external_storage with a process group (pg): sharded "
                    "tables are in memory only for now"
                )
            _per_rank_capacity(e, options, num_embeddings, world_size)
            self._tables.append(_Table(name, dim, num_embeddings, features, mode, None, options, e))
            return
        store, cache_rows = storage_for(options, e, name, where)
        if store is not None and options.external_storage is store:
            for t in self._tables:
                if t.store is store:
                    raise _C.InvalidArgument(
                        f"{where}: external_storage {store.describe()} is already the lower tier "
                        f"of table '{t.name}'; a store holds one table's keys (give each table "
                        "its own, or a callable (table name, row_dim) -> Storage)"
                    )
        if grouped and store is None and e.admit_threshold <= 1:
            self._tables.append(_Table(name, dim, num_embeddings, features, mode, None, options, e))
            return
        with self._on_device():
            handle = _C.Embedding(self._backend(), e, store, cache_rows, caching)
        table = _Table(name, dim, num_embeddings, features, mode, handle, options, e)
        table.store = store  # keeps a Python store (a dynemb.Storage subclass) alive with it
        self._tables.append(table)

    def _backend(self):
        return _C.Backend.CUDA if self._device.type == "cuda" else _C.Backend.CPU

    def _group(self):
        """Runs tables of one row layout and one pooling mode as one C++ EmbeddingCollection
        each; tables that cannot join one (caching, admission) run alone."""
        groups: Dict[tuple, List[_Table]] = {}
        for t in self._tables:
            key = ("alone", t.name) if t.handle is not None else _layout_key(t) + (t.mode,)
            groups.setdefault(key, []).append(t)
        self._groups = []
        for tables in groups.values():
            if tables[0].handle is not None:
                group = _TableGroup(tables, _SingleTable(tables[0].handle))
            else:
                with self._on_device():
                    handle = _C.EmbeddingCollection(self._backend(),
                                                    [t.compiled_options for t in tables])
                group = _TableGroup(tables, handle)
                for i, t in enumerate(tables):
                    t.handle = handle.table(i)
            for i, t in enumerate(tables):
                t.group, t.index = group, i
            self._groups.append(group)

    def _shard(self, communicator, router: str, exchange: str):
        """Collective: builds one ShardedCollection per group of tables of one row layout (in
        table order, so every rank builds the same groups in the same order)."""
        groups: Dict[tuple, List[_Table]] = {}
        for t in self._tables:
            groups.setdefault(_layout_key(t), []).append(t)
        self._groups, self._sharded = [], True
        for tables in groups.values():
            with self._on_device():
                handle = _C.ShardedCollection(communicator, [t.compiled_options for t in tables],
                                              router, exchange)
            group = _TableGroup(tables, handle)
            for i, t in enumerate(tables):
                t.group, t.index = group, i
            self._groups.append(group)

    # --- running ---------------------------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        return self._device

    def set_host_sync_free(self, on: bool = True, key_bits: int = 0) -> None:
        """Training steps of the grouped tables (group_tables=True) that read nothing on the
        host: each collection's forward and backward are issued without waiting for the device
        (what `dynemb bench train --grouped-tables` times). A training batch with a key wider
        than key_bits bits (0: the widest key of the steps so far, so declare it when later
        batches may hold wider keys; negative keys are wide) or with bad offsets is then refused
        on the device instead of raising: no table changes, its outputs read the eval
        initializer, and table_stats()[name]["refused_batches"] counts it. Evaluation, tables
        that run alone (caching, admission) and gradient_check "error" keep their host reads.
        InvalidArgument without grouped tables, when sharded, or for key_bits outside [0, the
        bits the tables' index leaves]."""
        where = f"{type(self).__name__}.set_host_sync_free"
        if isinstance(key_bits, bool) or not isinstance(key_bits, int) or key_bits < 0:
            raise _C.InvalidArgument(f"{where}: key_bits = {key_bits!r}, must be an int >= 0")
        if self._sharded:
            raise _C.InvalidArgument(
                f"{where}: the module is sharded over a process group; sharded steps exchange "
                "counts between ranks and keep their host reads"
            )
        collections = [g.handle for g in (self._groups or [])
                       if isinstance(g.handle, _C.EmbeddingCollection)]
        if not collections:
            raise _C.InvalidArgument(
                f"{where}: the module has no grouped tables (build it with group_tables=True; "
                "tables with caching or admission run alone and keep their host reads)"
            )
        for handle in collections:
            handle.set_host_sync_free(bool(on), key_bits)

    def _check_device(self):
        if self._device_anchor.device != self._device:
            raise _C.StateError(
                f"{type(self).__name__}: the module was moved to {self._device_anchor.device}, but "
                f"its dynamic tables live on {self._device} and do not move; build the module "
                f"on the device it should run on"
            )

    def _stream(self) -> int:
        if self._device.type == "cuda":
            return torch.cuda.current_stream(self._device).cuda_stream
        return 0

    def _on_device(self):
        """The module's CUDA device made current for a call (the compiled tables expect their
        device current, whichever device the caller has current); nothing on the CPU."""
        if self._device.type == "cuda":
            return torch.cuda.device(self._device)
        return contextlib.nullcontext()

    def _run_forward(self, calls, training: bool):
        """Per-table outputs and training forward numbers of per-table calls."""
        with self._on_device():
            if self._groups is not None:
                return self._run_grouped_forward(calls, training)
            stream = self._stream()
            outs, generations = [], []
            for table, indices, offsets, weights, rows in calls:
                out = torch.empty((rows, table.dim), dtype=_out_dtype(table),
                                  device=self._device)
                t_training = training and table.options.training
                table.handle.forward(indices, offsets, weights, table.mode, t_training, out,
                                     stream)
                outs.append(out)
                generations.append(table.handle.generation if t_training else 0)
            return outs, generations

    def _run_backward(self, tables, pieces, grads, generations):
        """Applies per-table piece gradients (grads[t]: table t's pieces, sized pieces[t])."""
        with self._on_device():
            stream = self._stream()
            if self._groups is not None:
                return self._run_grouped_backward(tables, pieces, grads, generations, stream)
            for table, sizes, grad, generation in zip(tables, pieces, grads, generations):
                if generation == 0:
                    continue
                g = _gradient(grad, [(n, table.dim) for n in sizes], self._device,
                              _out_dtype(table))
                table.handle.backward(g, generation, stream)

    def _run_grouped_forward(self, calls, training: bool):
        """Every group's forward (sharded: collective; every rank runs every group, in order,
        even with no ids); the outputs per table, and per table its group's training forward
        number."""
        stream = self._stream()
        by_table = {id(c[0]): c for c in calls}
        outs, generations = {}, {}
        for group in self._groups:
            group_calls = [by_table[id(t)] for t in group.tables]
            rows = [c[4] for c in group_calls]
            out = torch.empty((sum(rows), group.tables[0].dim),
                              dtype=_out_dtype(group.tables[0]), device=self._device)
            batches = [(c[1], c[2], c[3], c[0].mode) for c in group_calls]
            g_training = training and group.training
            generation = group.handle.forward(batches, g_training, out, stream)
            for t, piece in zip(group.tables, torch.split(out, rows)):
                outs[id(t)], generations[id(t)] = piece, generation
        return [outs[id(c[0])] for c in calls], [generations[id(c[0])] for c in calls]

    def _run_grouped_backward(self, tables, pieces, grads, generations, stream):
        by_table = {id(t): (s, g, n) for t, s, g, n in zip(tables, pieces, grads, generations)}
        for group in self._groups:
            parts = [by_table.get(id(t)) for t in group.tables]
            if any(p is None for p in parts) or parts[0][2] == 0:
                continue  # an evaluation forward or a group without training: no step
            dim = group.tables[0].dim
            grad = _gradient([g for p in parts for g in p[1]],
                             [(n, dim) for p in parts for n in p[0]], self._device,
                             _out_dtype(group.tables[0]))
            group.handle.backward(grad, parts[0][2], stream)

    def _run_step(self, step, trains: bool) -> List[torch.Tensor]:
        """Runs a step's lookups; in training with grad mode (and a table that trains), through
        autograd."""
        self._check_device()
        training = self.training
        if training and trains and torch.is_grad_enabled():
            return list(_Lookup.apply(self._grad_anchor, step))
        return step.forward(training=training)

    def _lookup(self, calls, pieces=None) -> List[torch.Tensor]:
        """Runs per-table calls' lookups: each table's output pieces (one a table without
        `pieces`), in order."""
        return self._run_step(_TableStep(self, calls, pieces),
                              any(c[0].options.training for c in calls))

    @staticmethod
    def _check_weights(weights: Optional[torch.Tensor], where: str):
        if weights is not None and weights.requires_grad and torch.is_grad_enabled():
            raise _C.InvalidArgument(
                f"{where}: per_sample_weights require grad; the weights are not differentiable "
                "(detach them, or run under torch.no_grad())"
            )

    # --- inspection ------------------------------------------------------------------------------
    def dynemb_tables(self) -> Dict[str, "_C.Embedding"]:
        """The compiled tables by name (what the checkpoint functions use)."""
        if self._sharded:
            raise _C.NotAvailable(
                f"{type(self).__name__} is sharded over a process group: its tables are shards "
                "(read them with shard_rows(); checkpoints of sharded collections from Python are "
                "not available yet)"
            )
        return {t.name: t.handle for t in self._tables}

    def table_stats(self) -> Dict[str, Dict[str, float]]:
        """Per table: size, capacity, load_factor, lookups, unique_lookups, rows_created,
        admission_pending, eval_misses, expired, nonfinite_gradients, evictions, refused,
        reserved_keys, rehashes, erased, score (sharded: this rank's shard); grouped tables also
        refused_batches (their collection's batches refused by set_host_sync_free's steps)."""
        if self._sharded:
            result = {}
            for group in self._groups:
                for t, stats in zip(group.tables, group.handle.stats()):
                    result[t.name] = stats
            return {t.name: result[t.name] for t in self._tables}
        return {t.name: t.handle.stats() for t in self._tables}

    def caching_stats(self) -> Dict[str, Optional[Dict[str, float]]]:
        """Per table with a lower tier (caching / external_storage): lookups, hits, misses,
        lower_hits, new_rows, filtered (misses private_store's filter showed stored nowhere),
        prefetched, rows_up / rows_down (and bytes), evictions_written, flushed_rows,
        batch_evicted, unsynced_calls, unserved, staged_prefetches / staged_fallbacks
        (prefetch_steps run on the device / that brought nothing up), staged_calls /
        staged_call_fallbacks (find_or_insert calls over a private store whose new misses went in
        on the device / that listed them on the host), prefetch_refused, lower_failures,
        pending_rows, lower_wait_ns, buffer_growths (device-path buffers grown after the table
        was built: none for lookups within DynamicEmbTableOptions.max_call_keys),
        lower_evicted (rows the lower tier's own policy dropped),
        phases (host ns of the device-path calls by phase: calls, lookup_ns, misses_ns,
        lower_read_ns, insert_ns, evicted_ns, write_down_ns, outputs_ns, total_ns), fast (the
        fast table's TableStats), lower (the lower tier's Storage.stats()), fast_size,
        fast_capacity, lower_tier; None for a table in memory only."""
        if self._sharded:
            return {t.name: None for t in self._tables}
        return {t.name: t.handle.caching_stats() for t in self._tables}

    def flush_storage(self):
        """Writes every row of each caching table down to its lower tier and flushes it (rows
        stay cached): what a RocksDB / Redis tier holds is then complete and durable."""
        for t in self._tables:
            if t.handle is not None and t.handle.caching_stats() is not None:
                t.handle.flush_storage()

    # --- sharded -------------------------------------------------------------------------------
    @property
    def is_sharded(self) -> bool:
        return self._sharded

    def _require_sharded(self, where: str):
        if not self._sharded:
            raise _C.StateError(f"{type(self).__name__}.{where}: the module is not sharded (pg=None)")

    def shard_rows(self, table: str):
        """This rank's shard of `table`: (keys [n] int64, rows [n, row_dim] float32: embedding |
        optimizer state | padding), on the host."""
        self._require_sharded("shard_rows")
        for t in self._tables:
            if t.name == table:
                keys, rows, _, _ = t.group.handle.export_rows(t.index, 0)
                return torch.from_dlpack(keys), torch.from_dlpack(rows)
        raise _C.InvalidArgument(f"{type(self).__name__}.shard_rows: table = '{table}', no such "
                                 f"table (tables: {[t.name for t in self._tables]})")

    def global_table_sizes(self) -> Dict[str, int]:
        """Collective: rows stored per table, summed over the ranks."""
        self._require_sharded("global_table_sizes")
        sizes = {}
        for group in self._groups:
            for t, n in zip(group.tables, group.handle.global_sizes()):
                sizes[t.name] = int(n)
        return {t.name: sizes[t.name] for t in self._tables}

    def owner_rank(self, table: str, key: int) -> int:
        """The rank of the process group that owns `key` of `table`."""
        self._require_sharded("owner_rank")
        for t in self._tables:
            if t.name == table:
                return int(t.group.handle.owner(t.index, int(key)))
        raise _C.InvalidArgument(f"{type(self).__name__}.owner_rank: table = '{table}', no such table")

    def stage_times(self) -> List[Dict[str, float]]:
        """Per group of tables: cumulative seconds per stage on this rank (dedup, exchange,
        lookup, pool, backward, optimizer) and steps."""
        self._require_sharded("stage_times")
        return [g.handle.stage_times() for g in self._groups]

    def extra_repr(self) -> str:
        return ", ".join(f"{t.name}: dim {t.dim}" for t in self._tables) + f", device={self._device}"


def _per_rank_capacity(e, options, num_embeddings: int, world: int):
    """A sharded table's capacity on each rank when DynamicEmbTableOptions leave it to
    num_embeddings: the busiest rank's share under hash routing (mean + 4 standard deviations,
    as the dist planner sizes it), in whole buckets, never above the unsharded capacity.
    Capacities given explicitly are per rank."""
    if options.max_capacity is not None or not num_embeddings or world <= 1:
        return
    bucket = max(int(options.bucket_capacity), 1)
    mean = num_embeddings / world
    share = int(math.ceil(mean + 4.0 * math.sqrt(mean * (1.0 - 1.0 / world))))
    capacity = min(max(-(-share // bucket) * bucket, bucket), int(e.table.max_capacity))
    t = e.table
    t.max_capacity = capacity
    t.init_capacity = min(int(t.init_capacity), capacity)
    e.table = t


def _layout_key(table: _Table) -> tuple:
    """What tables sharded in one collection must share (EmbeddingCollection's rules)."""
    e = table.compiled_options
    o, i = e.optimizer, e.eval_initializer
    return (
        e.dim, table.options.training, e.gradient_check, e.align_rows, e.table.device,
        e.value_type, e.stochastic_rounding, e.deterministic_backward, e.state_in_value_type,
        e.output_type,
        e.admit_threshold > 1 and table.name,
        (o.kind, o.learning_rate, o.beta1, o.beta2, o.eps, o.rho, o.initial_accumulator,
         o.ftrl_l1, o.ftrl_l2, o.ftrl_beta, o.weight_decay, o.clip_norm, o.clip_value),
        (i.kind, i.low, i.high, i.mean, i.stddev, i.trunc_lower, i.trunc_upper, i.value, i.seed),
    )


def _as_int64(t: torch.Tensor, where: str, name: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise _C.InvalidArgument(f"{where}: {name} is a {type(t).__name__}, must be a torch.Tensor")
    if t.dtype == torch.int32:
        return t.to(torch.int64)
    return t


class DynamicEmbeddingBag(DynamicEmbModule):
    """A pooled dynamic table used like nn.EmbeddingBag: forward(input, offsets,
    per_sample_weights) with 2-D input (fixed bags) or 1-D input and bag starts (or, with
    include_last_offset, bags + 1 offsets). mode "sum" or "mean"; weights with "sum" only."""

    def __init__(self, num_embeddings: int, embedding_dim: int, mode: str = "sum",
                 table_options: Optional[DynamicEmbTableOptions] = None,
                 fused_params: Optional[dict] = None, device=None,
                 include_last_offset: bool = False, name: str = "table"):
        super().__init__(device)
        m = _pooling_mode(mode, "DynamicEmbeddingBag")
        if m == _C.PoolingMode.NONE:
            raise _C.InvalidArgument("DynamicEmbeddingBag: mode = none; use DynamicEmbedding")
        self.embedding_dim, self.num_embeddings = embedding_dim, num_embeddings
        self.mode, self.include_last_offset = m, include_last_offset
        self._add_table(name, embedding_dim, num_embeddings, [name], m,
                        table_options or DynamicEmbTableOptions(), fused_params)

    def forward(self, input: torch.Tensor, offsets: Optional[torch.Tensor] = None,
                per_sample_weights: Optional[torch.Tensor] = None) -> torch.Tensor:
        where = "DynamicEmbeddingBag.forward"
        input = _as_int64(input, where, "input")
        if input.dim() == 2:
            if offsets is not None:
                raise _C.InvalidArgument(f"{where}: offsets must be None with 2-D input")
            bags, length = input.shape
            full = torch.arange(0, bags * length + 1, max(length, 1), dtype=torch.int64,
                                device=input.device)[: bags + 1]
            if length == 0:
                full = torch.zeros(bags + 1, dtype=torch.int64, device=input.device)
            input = input.reshape(-1)
            if per_sample_weights is not None:
                per_sample_weights = per_sample_weights.reshape(-1)
        elif input.dim() == 1:
            if offsets is None:
                raise _C.InvalidArgument(f"{where}: offsets = None, must be given with 1-D input")
            offsets = _as_int64(offsets, where, "offsets")
            if self.include_last_offset:
                full = offsets
            else:
                if offsets.dim() != 1:
                    raise _C.InvalidArgument(f"{where}: offsets: ndim = {offsets.dim()}, must be 1")
                end = torch.full((1,), input.numel(), dtype=torch.int64, device=offsets.device)
                full = torch.cat([offsets, end])
        else:
            raise _C.InvalidArgument(f"{where}: input: ndim = {input.dim()}, must be 1 or 2")
        if per_sample_weights is not None and self.mode != _C.PoolingMode.SUM:
            raise _C.InvalidArgument(
                f"{where}: per_sample_weights are given with mode MEAN; they are for mode SUM only"
            )
        self._check_weights(per_sample_weights, where)
        weights = None if per_sample_weights is None else per_sample_weights.detach()
        table = self._tables[0]
        return self._lookup([(table, input, full, weights, full.numel() - 1)])[0]


class DynamicEmbedding(DynamicEmbModule):
    """A sequence dynamic table used like nn.Embedding: forward(input) of any shape gives
    input.shape + (embedding_dim,)."""

    def __init__(self, num_embeddings: int, embedding_dim: int,
                 table_options: Optional[DynamicEmbTableOptions] = None,
                 fused_params: Optional[dict] = None, device=None, name: str = "table"):
        super().__init__(device)
        self.embedding_dim, self.num_embeddings = embedding_dim, num_embeddings
        self._add_table(name, embedding_dim, num_embeddings, [name], _C.PoolingMode.NONE,
                        table_options or DynamicEmbTableOptions(), fused_params)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        input = _as_int64(input, "DynamicEmbedding.forward", "input")
        flat = input.reshape(-1)
        # One bag holding every id: the compiled table checks the ids against it.
        bag = torch.full((2,), flat.numel(), dtype=torch.int64, device=flat.device)
        bag[0] = 0
        out = self._lookup([(self._tables[0], flat, bag, None, flat.numel())])[0]
        return out.view(*input.shape, self.embedding_dim)


def _options_for(table_options, name: str):
    if table_options is None:
        return DynamicEmbTableOptions()
    if isinstance(table_options, DynamicEmbTableOptions):
        # A store object is shared, not copied (a store given here for several tables is
        # refused when the second table takes it).
        store = table_options.external_storage
        return copy.deepcopy(table_options, {id(store): store})
    if isinstance(table_options, dict):
        if name not in table_options:
            raise _C.InvalidArgument(f"table_options: no entry for table '{name}'")
        return table_options[name]
    raise _C.InvalidArgument(
        f"table_options is a {type(table_options).__name__}, must be DynamicEmbTableOptions or "
        "a dict of them by table name"
    )


class _KeyedCollection(DynamicEmbModule):
    """Tables fed from one keyed jagged batch (a feature reads one table; a table may serve
    several features)."""

    def __init__(self, tables, table_options, fused_params, device, pooled: bool, pg=None,
                 router: str = "hash", exchange: str = "rows", group_tables: bool = False):
        super().__init__(device)
        where = type(self).__name__
        communicator = None
        if pg is not None:
            from .distributed import communicator_for

            communicator = communicator_for(pg, self._device)
        # Sharded: a rank whose configuration fails here tells the others before anyone enters
        # the collective construction (else they would wait for it).
        error = None
        try:
            self._add_tables(tables, table_options, fused_params, pooled,
                             communicator.world_size if communicator is not None else 0,
                             group_tables)
        except Exception as e:  # noqa: BLE001 - re-raised below, on every rank when sharded
            if communicator is None:
                raise
            error = e
        if communicator is not None:
            mine = "" if error is None else f"{type(error).__name__}: {error}"
            failed = [(r, m.decode()) for r, m in enumerate(communicator.all_gather_strings(mine)) if m]
            if error is not None:
                raise error
            if failed:
                raise _C.InvalidArgument(
                    f"{where}: the configuration failed on rank(s) "
                    + "; ".join(f"{r}: {m}" for r, m in failed)
                )
            self._shard(communicator, router, exchange)
        elif group_tables:
            self._group()
        self._feature_order = [f for t in self._tables for f in t.features]
        self._plan_cache = None  # ((keys, stride), _Plan) of the last batch

    def _add_tables(self, tables, table_options, fused_params, pooled: bool, world_size: int,
                    grouped: bool):
        where = type(self).__name__
        if isinstance(table_options, dict):
            unknown = sorted(set(table_options) - {c.name for c in tables})
            if unknown:
                raise _C.InvalidArgument(f"{where}: table_options names unknown tables {unknown}")
        seen = {}
        for config in tables:
            features = list(getattr(config, "feature_names", None) or [config.name])
            for f in features:
                if f in seen:
                    raise _C.InvalidArgument(
                        f"{where}: feature '{f}' is read by tables '{seen[f]}' and '{config.name}'"
                    )
                seen[f] = config.name
            mode = (_pooling_mode(getattr(config, "pooling", "SUM"), f"{where} table '{config.name}'")
                    if pooled else _C.PoolingMode.NONE)
            self._add_table(config.name, int(config.embedding_dim),
                            int(getattr(config, "num_embeddings", 0) or 0), features, mode,
                            _options_for(table_options, config.name), fused_params, world_size,
                            grouped)
        if world_size > 0 and not self._tables:
            raise _C.InvalidArgument(f"{where}: tables is empty; a sharded collection needs one")

    def _sharded_pieces(self, features, weighted: bool):
        """_pieces; when sharded, a batch this rank cannot cut still takes part in the first
        group's exchange (with offsets every rank's check refuses), so that every rank raises
        instead of the others waiting."""
        try:
            step, trains, batch = self._pieces(features, weighted)
        except Exception:
            if self._sharded:
                self._poison_step()
            raise
        return self._run_step(step, trains), batch

    def _poison_step(self):
        # No batches: the compiled collection takes part in the step refusing it, so every
        # rank raises.
        try:
            with self._on_device():
                self._groups[0].handle.forward([], False, None, self._stream())
        except _C.Error:
            pass

    def _batch(self, features, weighted: bool) -> "_Batch":
        """The keyed batch's parts, checked."""
        where = f"{type(self).__name__}.forward"
        for attr in ("keys", "values"):
            if not hasattr(features, attr):
                raise _C.InvalidArgument(
                    f"{where}: features is a {type(features).__name__}, must be a keyed jagged "
                    "batch (keys(), values(), lengths() or offsets())"
                )
        keys = features.keys()
        values = _as_int64(features.values(), where, "features.values()")
        offsets = features.offsets() if hasattr(features, "offsets") else None
        if offsets is None:
            offsets = _offsets_from_lengths(features.lengths())
        offsets = _as_int64(offsets, where, "features.offsets()")
        n_bags = offsets.numel() - 1
        if len(keys) == 0 or n_bags % len(keys) != 0:
            raise _C.InvalidArgument(
                f"{where}: features: {n_bags} bags over {len(keys)} keys; every key must have the "
                "same number of bags"
            )
        stride = n_bags // len(keys)
        weights = features.weights_or_none() if weighted else None
        if weighted and weights is None:
            raise _C.InvalidArgument(f"{where}: is_weighted = True, but features carry no weights")
        self._check_weights(weights, where)
        if weights is not None:
            weights = weights.detach()
        return _Batch(features, keys, values, offsets, stride, weights,
                      _key_starts(features, offsets, stride, len(keys), where))

    def _plan(self, keys, stride: int) -> "_Plan":
        """How a batch of these keys and this stride is cut into the tables' batches (kept for
        the next batch of the same keys and stride)."""
        cache_key = (tuple(keys), stride)
        if self._plan_cache is not None and self._plan_cache[0] == cache_key:
            return self._plan_cache[1]
        plan = _Plan(self, list(keys), stride)
        self._plan_cache = (cache_key, plan)
        return plan

    def _pieces(self, features, weighted: bool):
        """The step of a keyed batch (its output pieces: one per feature, in the module's
        feature order), whether it trains, and the batch."""
        batch = self._batch(features, weighted)
        plan = self._plan(batch.keys, batch.stride)
        starts, values, weights, stride = batch.starts, batch.values, batch.weights, batch.stride
        # Every contiguous table's offsets rebased to start at 0, in one gather.
        rebased = None
        if plan.gather is not None:
            offsets = batch.offsets
            rebased = offsets.index_select(0, plan.gather).sub_(offsets.index_select(0, plan.base))
        if plan.packed:
            launches = []
            for group, span, tables in plan.groups:
                id_ranges, bags, pieces = [], [], []
                for first, last in tables:
                    id_ranges += (starts[first], starts[last + 1])
                    bags.append((last + 1 - first) * stride)
                    if group.tables[0].mode == _C.PoolingMode.NONE:
                        pieces += [starts[p + 1] - starts[p] for p in range(first, last + 1)]
                    else:
                        pieces += [stride] * (last + 1 - first)
                launches.append((group, values, rebased[span[0]:span[1]], weights, id_ranges,
                                 bags, group.tables[0].mode, sum(pieces), pieces))
            step = _PackedStep(self, launches)
            return _Reordered(step, plan.order), plan.trains, batch
        calls, pieces = [], []
        for table, (ps, span) in zip(self._tables, plan.tables):
            if span is not None:
                a, b = starts[ps[0]], starts[ps[-1] + 1]
                ids, offs = values[a:b], rebased[span[0]:span[1]]
                w = None if weights is None else weights[a:b]
            else:  # features out of the batch's key order: gathered
                ids = torch.cat([values[starts[p]:starts[p + 1]] for p in ps])
                offsets = batch.offsets
                lengths = torch.cat([offsets[p * stride + 1:(p + 1) * stride + 1]
                                     - offsets[p * stride:(p + 1) * stride] for p in ps])
                offs = _offsets_from_lengths(lengths)
                w = None if weights is None else torch.cat(
                    [weights[starts[p]:starts[p + 1]] for p in ps])
            if table.mode == _C.PoolingMode.NONE:
                sizes = [starts[p + 1] - starts[p] for p in ps]
            else:
                sizes = [stride] * len(ps)
            calls.append((table, ids, offs, w, sum(sizes)))
            pieces.append(sizes)
        return _TableStep(self, calls, pieces), plan.trains, batch


class _Batch:
    """A keyed batch's parts: keys, int64 values and offsets, bags per key (stride), weights or
    None, and the host list of each key's first id (starts, keys + 1 entries)."""

    def __init__(self, features, keys, values, offsets, stride, weights, starts):
        self.features, self.keys, self.values, self.offsets = features, keys, values, offsets
        self.stride, self.weights, self.starts = stride, weights, starts

    def lengths(self) -> torch.Tensor:
        lengths = self.features.lengths() if hasattr(self.features, "lengths") else None
        if lengths is None or lengths.numel() != self.offsets.numel() - 1:
            lengths = self.offsets[1:] - self.offsets[:-1]
        return lengths


def _key_starts(features, offsets, stride: int, n_keys: int, where: str) -> List[int]:
    """Each key's first id and the end (keys + 1 host ints): the batch's offset_per_key()
    where it has one (TorchRec's KeyedJaggedTensor and dynemb's compute it once and keep it),
    else one read of the offsets from the device."""
    per_key = getattr(features, "offset_per_key", None)
    if per_key is not None:
        starts = per_key()
        if len(starts) != n_keys + 1:
            raise _C.InvalidArgument(
                f"{where}: features.offset_per_key() has {len(starts)} entries, must be keys + 1 "
                f"= {n_keys + 1}"
            )
        return starts if isinstance(starts, list) else [int(x) for x in starts]
    if stride == 0:
        return [0] * (n_keys + 1)
    return offsets[::stride].tolist()


class _Plan:
    """How a collection cuts a batch of given keys and stride: per table its features'
    positions and, where they are consecutive keys in order, its span in the rebased offsets
    (gather: the offsets' entries of those tables, base: each entry's table start). packed:
    every table consecutive and every group an EmbeddingCollection (grouped, not sharded): per
    group (group, span, per table (first key, last key)); order: the module's feature order
    among the groups' pieces."""

    def __init__(self, module, keys: List[str], stride: int):
        where = f"{type(module).__name__}.forward"
        position = {k: i for i, k in enumerate(keys)}
        for table in module._tables:
            missing = [f for f in table.features if f not in position]
            if missing:
                raise _C.InvalidArgument(
                    f"{where}: features: key(s) {missing} of table '{table.name}' are missing "
                    f"from the batch (its keys: {keys})"
                )
        groups = module._groups
        in_groups = [t for g in groups for t in g.tables] if groups is not None else module._tables
        spans, gather, base, n = {}, [], [], 0
        for table in in_groups:
            ps = [position[f] for f in table.features]
            if ps != list(range(ps[0], ps[0] + len(ps))):
                continue
            lo, hi = ps[0] * stride, (ps[-1] + 1) * stride
            gather.append(torch.arange(lo, hi + 1, dtype=torch.int64))
            base.append(torch.full((hi - lo + 1,), lo, dtype=torch.int64))
            spans[id(table)] = (n, n + hi - lo + 1)
            n += hi - lo + 1
        device = module._device
        self.gather = torch.cat(gather).to(device) if gather else None
        self.base = torch.cat(base).to(device) if base else None
        self.tables = [([position[f] for f in t.features], spans.get(id(t)))
                       for t in module._tables]
        self.trains = any(t.options.training for t in module._tables)
        self.packed = (groups is not None and not module._sharded
                       and len(spans) == len(module._tables)
                       and all(isinstance(g.handle, _C.EmbeddingCollection) for g in groups))
        self.groups, self.order = [], []
        if self.packed:
            piece_of, i = {}, 0
            for g in groups:
                ranges = []
                for t in g.tables:
                    ps = [position[f] for f in t.features]
                    ranges.append((ps[0], ps[-1]))
                    for f in t.features:
                        piece_of[f], i = i, i + 1
                span = (spans[id(g.tables[0])][0], spans[id(g.tables[-1])][1])
                self.groups.append((g, span, ranges))
            self.order = [piece_of[f] for t in module._tables for f in t.features]
            if self.order == list(range(len(self.order))):
                self.order = None  # already in the module's order


class _Reordered:
    """A step whose pieces are handed out in another order (order[i]: the step's piece that
    comes i-th), and whose gradients are handed back in the step's."""

    def __init__(self, step, order):
        self.step, self.order = step, order

    def forward(self, training: bool) -> List[torch.Tensor]:
        pieces = self.step.forward(training)
        return pieces if self.order is None else [pieces[i] for i in self.order]

    def backward(self, grads):
        if self.order is not None:
            back = [None] * len(grads)
            for i, j in enumerate(self.order):
                back[j] = grads[i]
            grads = back
        self.step.backward(grads)


class DynamicEmbeddingBagCollection(_KeyedCollection):
    """Pooled tables (EmbeddingBagConfig list) fed from a KeyedJaggedTensor; forward gives a
    KeyedTensor of every feature's [batch, dim] output. is_weighted: per-id weights from the
    batch (SUM only).

    pg: a torch.distributed process group (or group.WORLD) to shard the tables over: each key
    lives on one rank (router "hash", or "modulo": key % world), every rank passes its own
    batch and gets its own outputs; construction, forward and backward are collective.
    exchange "rows" (owners return rows, the requester pools) or "pooled_on_owner" (owners
    pool their part of every bag; SparseOperationKit's distributed embedding).

    group_tables (opt-in; always so when sharded): tables of one row layout (dim, optimizer,
    eval initializer, training) and one pooling mode run as one C++ EmbeddingCollection: one
    dedup, one pooling launch and one fused backward for all of them (caching and admission
    tables run alone). Same results as separate tables."""

    def __init__(self, tables: Sequence[EmbeddingBagConfig],
                 table_options: Union[None, DynamicEmbTableOptions,
                                      Dict[str, DynamicEmbTableOptions]] = None,
                 fused_params: Optional[dict] = None, device=None, is_weighted: bool = False,
                 pg=None, router: str = "hash", exchange: str = "rows",
                 group_tables: bool = False):
        super().__init__(tables, table_options, fused_params, device, pooled=True, pg=pg,
                         router=router, exchange=exchange, group_tables=group_tables)
        self.is_weighted = is_weighted
        if is_weighted:
            for t in self._tables:
                if t.mode != _C.PoolingMode.SUM:
                    raise _C.InvalidArgument(
                        f"DynamicEmbeddingBagCollection: is_weighted with table '{t.name}' pooling "
                        "MEAN; weights are for SUM only"
                    )

    def forward(self, features) -> KeyedTensor:
        pieces, _ = self._sharded_pieces(features, self.is_weighted)
        return KeyedTensor(self._feature_order, pieces)


class DynamicEmbeddingCollection(_KeyedCollection):
    """Sequence tables (EmbeddingConfig list) fed from a KeyedJaggedTensor; forward gives, per
    feature, a JaggedTensor of one [dim] row per id. pg, router: sharded over a process group;
    group_tables: tables of one row layout run as one C++ EmbeddingCollection; both as
    DynamicEmbeddingBagCollection."""

    def __init__(self, tables: Sequence[EmbeddingConfig],
                 table_options: Union[None, DynamicEmbTableOptions,
                                      Dict[str, DynamicEmbTableOptions]] = None,
                 fused_params: Optional[dict] = None, device=None, pg=None,
                 router: str = "hash", group_tables: bool = False):
        super().__init__(tables, table_options, fused_params, device, pooled=False, pg=pg,
                         router=router, group_tables=group_tables)

    def forward(self, features) -> Dict[str, JaggedTensor]:
        pieces, batch = self._sharded_pieces(features, False)
        lengths, stride = batch.lengths(), batch.stride
        position = {k: i for i, k in enumerate(batch.keys)}
        return {f: JaggedTensor(rows, lengths[position[f] * stride:(position[f] + 1) * stride])
                for f, rows in zip(self._feature_order, pieces)}
