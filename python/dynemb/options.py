"""Configuration with NVIDIA dynamicemb's names and defaults.

A `DynamicEmbTableOptions` says how one dynamic table is built; `to_embedding_options` turns it
(with the table's dim, its row count and the fused optimizer) into the compiled module's
options. Options whose part is not built yet (index types other than int64, ...) are accepted
here and refused with `NotAvailable` when a module is built from them. `caching` / `external_storage` are read by
the modules (storage_for), which put a caching table under the trainable table.
"""

import enum
import math
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _C


class DynamicEmbInitializerMode(enum.Enum):
    """How a new row is filled."""

    NORMAL = "normal"
    TRUNCATED_NORMAL = "truncated_normal"
    UNIFORM = "uniform"
    CONSTANT = "constant"
    DEBUG = "debug"  # the row holds float(key mod 2^24): a row shows its own key


@dataclass
class DynamicEmbInitializerArgs:
    """Parameters of an initializer. lower / upper: UNIFORM's range and TRUNCATED_NORMAL's
    bounds (absolute values); None takes +-1/sqrt(num_embeddings) (0 and 1 without a row count).
    seed: dynemb's addition; a row is a pure function of (seed, key), on every device."""

    mode: DynamicEmbInitializerMode = DynamicEmbInitializerMode.UNIFORM
    mean: float = 0.0
    std_dev: float = 1.0
    lower: Optional[float] = None
    upper: Optional[float] = None
    value: float = 0.0
    seed: int = 0


class DynamicEmbScoreStrategy(enum.IntEnum):
    """How a key's score (its worth when a bucket is full) is written by each batch."""

    TIMESTAMP = 0  # the clock (ns) of the batch
    STEP = 1  # the table's step, advanced once per training step
    CUSTOMIZED = 2  # set by the user through set_score
    LFU = 3  # the count of touches
    NO_EVICTION = 4  # not available: a dynemb table is bounded by max_capacity


class DynamicEmbCheckMode(enum.IntEnum):
    """What a refused insert does: ERROR raises InsertRefused after the batch, WARNING logs,
    IGNORE only counts (stats()["refused"]); a refused key reads the eval initializer."""

    ERROR = 0
    WARNING = 1
    IGNORE = 2


class DynamicEmbPoolingMode(enum.IntEnum):
    """How a bag's rows become its output."""

    SUM = 0
    MEAN = 1
    NONE = 2  # sequence: one row per id


class DynamicEmbEvictStrategy(enum.Enum):
    """Accepted for dynamicemb compatibility; eviction follows score_strategy."""

    LRU = "lru"
    LFU = "lfu"


class EvictedItemMode(enum.Enum):
    """Only DISCARD is available: evictions are counted (stats()["evictions"])."""

    DISCARD = "discard"
    RETAIN_KEY = "retain_key"


@dataclass
class FrequencyAdmissionStrategy:
    """Admits a key into the table once it was seen `threshold` times; until then it reads the
    eval initializer and gets no update. counter_capacity: slots of the counting table (0: the
    table's max_capacity)."""

    threshold: int
    counter_capacity: int = 0
    initializer_args: Optional[DynamicEmbInitializerArgs] = None


@dataclass
class DynamicEmbTableOptions:
    """One dynamic table, with dynamicemb's field names and defaults.

    max_capacity None takes the row count of the table's config (rounded up to whole buckets,
    at least one bucket); init_capacity None takes max_capacity. global_hbm_for_values: bytes of
    GPU memory for values; 0 (the default) keeps every value in GPU memory, a positive budget
    puts the values beyond it in pinned host memory. ttl_steps / ttl_seconds (dynemb's
    additions): rows not touched for that long are erased at the end of a training step.
    caching: the table is a cache (a fast tier of global_hbm_for_values bytes of rows) over a
    lower tier holding the rest: external_storage, or host memory of max_capacity rows.
    external_storage: a dynemb.Storage (HostStorage, RocksDbStorage, RedisStorage) whose
    row_dim is dynemb.embedding_row_dim of the table, or a callable (table name, row_dim) ->
    Storage; without caching, the table as sized by its capacities is the fast tier over it.
    embedding_dtype: how the rows' embedding elements are stored, torch.float32 (None, the
    default), torch.float16 or torch.bfloat16 (two a 32-bit word; the optimizer state stays
    float32, and lookups, gradients and the optimizer's arithmetic are float32;
    docs/value_types.md). stochastic_rounding (dynemb's addition, 16-bit types): each updated
    weight is rounded stochastically (unbiased on average) instead of to nearest even.
    state_in_value_type (dynemb's addition, torch.bfloat16 rows only): the optimizer's state
    (Adam's moments, ...) is stored in bfloat16 too, each value rounded stochastically,
    instead of float32; a bf16 Adam row then moves about 40% fewer bytes.
    output_dtype (dynemb's addition, as FBGEMM's output_dtype / PyTorch's EmbeddingBag of 16-bit
    weights): what lookups return and the backward takes: torch.float32 (None, the default), or
    the embedding_dtype of 16-bit rows (an even dim); each pooled output is summed in float32
    and rounded to nearest even once, each gradient element read as its float32 value
    (docs/value_types.md). Not with a process group (pg) for now.
    deterministic_backward (dynemb's addition): False lets the GPU backward sum each row's
    gradients in any order (float atomics): rows then agree with the ordered backward within
    float32 rounding, not bit for bit, and may differ run to run; True (the default) keeps the
    fixed order, the same on CPU and GPU. The CPU backend is ordered either way.

    dynemb's additions that pass C++ TableOptions / CachingOptions through (docs/python.md,
    "dynamicemb's options, as implemented"): num_threads and prefault_host_memory (CPU backend
    only: worker threads; fault in new table memory at construction and growth instead of at
    first write); coalesce_copies_min_batch, join_contended_copies, grouped_write_min_batch
    (None: never) and host_keys_in_flight (CUDA backend only: how a call with many copies of a
    key, or a large write, is run; a CPU table accepts them and is unchanged by them);
    private_store (caching / external_storage only: the lower tier is this table's alone, so a
    filter of the keys that may be below, 2^private_store_filter_log2_bits bits in the fast
    tier's memory, spares the lower-tier read of keys stored nowhere; caching_stats()
    ["filtered"] counts them; leave it False for a store that anything else writes);
    max_call_keys (caching / external_storage only: the most keys one lookup of the table passes,
    like a maximum batch size; 0, the default, sizes nothing ahead: the caching table's device-path
    buffers are then sized for such a call when the table is built instead of growing inside the
    first calls that need them, pinning about 8 * keys * row_dim + 192 * keys bytes of host
    memory; caching_stats()["buffer_growths"] counts growths after that).
    """

    embedding_dtype: Any = None
    dim: Optional[int] = None
    max_capacity: Optional[int] = None
    evict_strategy: DynamicEmbEvictStrategy = DynamicEmbEvictStrategy.LRU
    local_hbm_for_values: int = 0
    device_id: Optional[int] = None
    training: bool = True
    initializer_args: DynamicEmbInitializerArgs = field(default_factory=DynamicEmbInitializerArgs)
    eval_initializer_args: DynamicEmbInitializerArgs = field(
        default_factory=lambda: DynamicEmbInitializerArgs(
            mode=DynamicEmbInitializerMode.CONSTANT, value=0.0
        )
    )
    caching: bool = False
    init_capacity: Optional[int] = None
    max_load_factor: float = 0.5
    score_strategy: DynamicEmbScoreStrategy = DynamicEmbScoreStrategy.TIMESTAMP
    score_function: Any = None
    bucket_capacity: int = 128
    safe_check_mode: DynamicEmbCheckMode = DynamicEmbCheckMode.IGNORE
    global_hbm_for_values: int = 0
    external_storage: Any = None
    index_type: Any = None
    admit_strategy: Optional[FrequencyAdmissionStrategy] = None
    admission_counter: Any = None
    evicted_item_mode: EvictedItemMode = EvictedItemMode.DISCARD
    ttl_steps: int = 0
    ttl_seconds: float = 0.0
    num_threads: int = 0
    deterministic_backward: bool = True
    stochastic_rounding: bool = False
    state_in_value_type: bool = False
    output_dtype: Any = None
    coalesce_copies_min_batch: Optional[int] = None
    prefault_host_memory: bool = True
    join_contended_copies: bool = False
    grouped_write_min_batch: Optional[int] = None
    host_keys_in_flight: int = 0
    private_store: bool = False
    private_store_filter_log2_bits: int = 27
    max_call_keys: int = 0


class EmbOptimType(enum.Enum):
    """The fused optimizers, named as FBGEMM's EmbOptimType (FBGEMM's own enum is accepted by
    value too); RMSPROP and FTRL are dynemb's / dynamicemb's additions."""

    SGD = "sgd"
    EXACT_SGD = "exact_sgd"
    ADAM = "adam"
    EXACT_ADAGRAD = "exact_adagrad"
    EXACT_ROWWISE_ADAGRAD = "exact_row_wise_adagrad"
    ROWWISE_ADAGRAD = "row_wise_adagrad"
    RMSPROP = "rmsprop"
    FTRL = "ftrl"


_OPTIMIZER_KINDS = {
    "sgd": _C.OptimizerKind.SGD,
    "exact_sgd": _C.OptimizerKind.SGD,
    "adam": _C.OptimizerKind.ADAM,
    "exact_adagrad": _C.OptimizerKind.ADAGRAD,
    "adagrad": _C.OptimizerKind.ADAGRAD,
    "exact_row_wise_adagrad": _C.OptimizerKind.ROWWISE_ADAGRAD,
    "row_wise_adagrad": _C.OptimizerKind.ROWWISE_ADAGRAD,
    "rowwise_adagrad": _C.OptimizerKind.ROWWISE_ADAGRAD,
    "rmsprop": _C.OptimizerKind.RMSPROP,
    "ftrl": _C.OptimizerKind.FTRL,
}

_FUSED_KEYS = {
    "optimizer",
    "learning_rate",
    "eps",
    "beta1",
    "beta2",
    "weight_decay",
    "gradient_clipping",
    "max_gradient",
    "max_norm",
    "initial_accumulator_value",
    "rho",
    "l1_reg",
    "l2_reg",
    "ftrl_beta",
    "learning_rate_power",
}


def optimizer_options(fused_params: Optional[dict]) -> "_C.OptimizerOptions":
    """FBGEMM-style fused params (optimizer, learning_rate, eps, beta1, beta2, weight_decay,
    gradient_clipping + max_gradient, max_norm, initial_accumulator_value, rho, and FTRL's
    l1_reg, l2_reg, ftrl_beta) as the compiled module's optimizer options."""
    params = dict(fused_params or {})
    unknown = sorted(set(params) - _FUSED_KEYS)
    if unknown:
        raise _C.InvalidArgument(
            f"fused_params: unknown key(s) {unknown}; accepted: {sorted(_FUSED_KEYS)}"
        )
    o = _C.OptimizerOptions()
    name = params.get("optimizer", EmbOptimType.SGD)
    name = getattr(name, "value", name)
    if not isinstance(name, str) or name.lower() not in _OPTIMIZER_KINDS:
        raise _C.NotAvailable(
            f"fused_params: optimizer = {params.get('optimizer')!r}; available: "
            f"{sorted(_OPTIMIZER_KINDS)}"
        )
    o.kind = _OPTIMIZER_KINDS[name.lower()]
    o.learning_rate = float(params.get("learning_rate", 0.01))
    o.eps = float(params.get("eps", 1e-8))
    o.beta1 = float(params.get("beta1", 0.9))
    o.beta2 = float(params.get("beta2", 0.999))
    o.weight_decay = float(params.get("weight_decay", 0.0))
    o.rho = float(params.get("rho", 0.99))
    o.initial_accumulator = float(params.get("initial_accumulator_value", 0.0))
    o.ftrl_l1 = float(params.get("l1_reg", 0.0))
    o.ftrl_l2 = float(params.get("l2_reg", 0.0))
    o.ftrl_beta = float(params.get("ftrl_beta", 0.0))
    if float(params.get("learning_rate_power", -0.5)) != -0.5:
        raise _C.NotAvailable(
            f"fused_params: learning_rate_power = {params['learning_rate_power']}, only -0.5 "
            "(the square root of FTRL-Proximal) is available"
        )
    if params.get("gradient_clipping", False):
        o.clip_value = float(params.get("max_gradient", 1.0))
    if "max_norm" in params:
        o.clip_norm = float(params["max_norm"])
    return o


def _initializer(args: DynamicEmbInitializerArgs, num_embeddings: Optional[int], where: str):
    init = _C.InitializerOptions()
    mode = args.mode
    if not isinstance(mode, DynamicEmbInitializerMode):
        raise _C.InvalidArgument(f"{where}.mode = {mode!r}, must be a DynamicEmbInitializerMode")
    bound = 1.0 / math.sqrt(num_embeddings) if num_embeddings else None
    lower = args.lower if args.lower is not None else (-bound if bound else 0.0)
    upper = args.upper if args.upper is not None else (bound if bound else 1.0)
    init.seed = int(args.seed)
    init.mean = float(args.mean)
    init.stddev = float(args.std_dev)
    init.value = float(args.value)
    if mode is DynamicEmbInitializerMode.UNIFORM:
        init.kind = _C.InitializerKind.UNIFORM
        init.low, init.high = float(lower), float(upper)
    elif mode is DynamicEmbInitializerMode.NORMAL:
        init.kind = _C.InitializerKind.NORMAL
    elif mode is DynamicEmbInitializerMode.TRUNCATED_NORMAL:
        init.kind = _C.InitializerKind.TRUNCATED_NORMAL
        if args.std_dev <= 0:
            raise _C.InvalidArgument(f"{where}.std_dev = {args.std_dev}, must be > 0")
        init.trunc_lower = float((lower - args.mean) / args.std_dev)
        init.trunc_upper = float((upper - args.mean) / args.std_dev)
    elif mode is DynamicEmbInitializerMode.CONSTANT:
        init.kind = _C.InitializerKind.CONSTANT
    else:
        init.kind = _C.InitializerKind.DEBUG
    return init


def _not_available(what: str, value, needs: str):
    raise _C.NotAvailable(f"DynamicEmbTableOptions.{what} = {value!r} is not available yet ({needs})")


def _whole_number(options, name: str, where: str, low: int, high: Optional[int] = None) -> int:
    """options.<name> as an int in [low, high]; InvalidArgument naming the field otherwise."""
    v = getattr(options, name)
    if isinstance(v, bool) or not isinstance(v, int) or v < low or (high is not None and v > high):
        limit = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.{name} = {v!r}, must be an int {limit}"
        )
    return v


def _round_up(n: int, multiple: int) -> int:
    return (n + multiple - 1) // multiple * multiple


def to_embedding_options(
    options: DynamicEmbTableOptions,
    dim: int,
    num_embeddings: Optional[int],
    fused_params: Optional[dict],
    device_index: int,
    where: str,
) -> "_C.EmbeddingOptions":
    """The compiled module's options of one table; raises NotAvailable for options whose part is
    not built yet and InvalidArgument for values out of range (naming the field)."""
    import torch

    if not isinstance(options, DynamicEmbTableOptions):
        raise _C.InvalidArgument(
            f"{where}: table options are a {type(options).__name__}, must be DynamicEmbTableOptions"
        )
    value_types = {None: _C.ValueType.FLOAT32, torch.float32: _C.ValueType.FLOAT32,
                   torch.float16: _C.ValueType.FLOAT16, torch.bfloat16: _C.ValueType.BFLOAT16}
    try:
        value_type = value_types[options.embedding_dtype]
    except (KeyError, TypeError):
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.embedding_dtype = {options.embedding_dtype!r}, must "
            "be torch.float32 (or None), torch.float16 or torch.bfloat16"
        ) from None
    try:
        output_type = value_types[options.output_dtype]
    except (KeyError, TypeError):
        output_type = None
    if output_type is None or output_type not in (_C.ValueType.FLOAT32, value_type):
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.output_dtype = {options.output_dtype!r}, must be "
            f"torch.float32 (or None) or the embedding_dtype ({options.embedding_dtype!r})"
        )
    if output_type != _C.ValueType.FLOAT32 and dim % 2 != 0:
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.output_dtype = {options.output_dtype!r} with dim = "
            f"{dim}, needs an even dim (16-bit outputs are written two elements a 32-bit word)"
        )
    for flag in ("deterministic_backward", "stochastic_rounding", "state_in_value_type",
                 "prefault_host_memory", "join_contended_copies", "private_store"):
        if not isinstance(getattr(options, flag), bool):
            raise _C.InvalidArgument(
                f"{where}: DynamicEmbTableOptions.{flag} = {getattr(options, flag)!r}, must be "
                "True or False"
            )
    if options.index_type not in (None, torch.int64):
        _not_available("index_type", options.index_type, "keys are int64 for now")
    if options.score_strategy == DynamicEmbScoreStrategy.NO_EVICTION or isinstance(
        options.score_strategy, tuple
    ):
        _not_available("score_strategy", options.score_strategy, "TIMESTAMP, STEP, CUSTOMIZED, LFU are")
    if options.score_function is not None:
        _not_available("score_function", options.score_function, "compound scores are not built")
    if options.evicted_item_mode != EvictedItemMode.DISCARD:
        _not_available("evicted_item_mode", options.evicted_item_mode, "evictions are counted, not kept")
    if options.admission_counter is not None:
        _not_available("admission_counter", options.admission_counter, "use admit_strategy")
    if options.dim is not None and options.dim != dim:
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.dim = {options.dim}, differs from the table's "
            f"embedding_dim {dim}"
        )
    if dim <= 0:
        raise _C.InvalidArgument(f"{where}: embedding_dim = {dim}, must be > 0")
    bucket = int(options.bucket_capacity)
    max_capacity = options.max_capacity
    if max_capacity is None:
        if not num_embeddings:
            raise _C.InvalidArgument(
                f"{where}: DynamicEmbTableOptions.max_capacity = None and no num_embeddings to "
                "take it from"
            )
        max_capacity = max(_round_up(int(num_embeddings), bucket), bucket) if bucket > 0 else num_embeddings
    init_capacity = options.init_capacity if options.init_capacity is not None else max_capacity
    if bucket > 0 and options.init_capacity is not None:
        init_capacity = min(_round_up(int(init_capacity), bucket), int(max_capacity))

    e = _C.EmbeddingOptions()
    e.dim = int(dim)
    t = e.table
    t.init_capacity = int(init_capacity)
    t.max_capacity = int(max_capacity)
    t.bucket_capacity = bucket
    t.max_load_factor = float(options.max_load_factor)
    t.score_policy = {
        DynamicEmbScoreStrategy.TIMESTAMP: _C.ScorePolicy.TIMESTAMP,
        DynamicEmbScoreStrategy.STEP: _C.ScorePolicy.STEP,
        DynamicEmbScoreStrategy.CUSTOMIZED: _C.ScorePolicy.CUSTOMIZED,
        DynamicEmbScoreStrategy.LFU: _C.ScorePolicy.LFU,
    }[DynamicEmbScoreStrategy(options.score_strategy)]
    t.safe_check = {
        DynamicEmbCheckMode.ERROR: _C.SafeCheck.ERROR,
        DynamicEmbCheckMode.WARNING: _C.SafeCheck.WARNING,
        DynamicEmbCheckMode.IGNORE: _C.SafeCheck.IGNORE,
    }[DynamicEmbCheckMode(options.safe_check_mode)]
    t.initializer = _initializer(options.initializer_args, num_embeddings, f"{where}.initializer_args")
    t.num_threads = int(options.num_threads)
    t.device = int(options.device_id) if options.device_id is not None else device_index
    t.prefault_host_memory = options.prefault_host_memory
    if options.coalesce_copies_min_batch is not None:
        t.coalesce_copies_min_batch = _whole_number(options, "coalesce_copies_min_batch", where, 0)
    t.join_contended_copies = options.join_contended_copies
    if options.grouped_write_min_batch is not None:
        t.grouped_write_min_batch = _whole_number(options, "grouped_write_min_batch", where, 0)
    t.host_keys_in_flight = _whole_number(options, "host_keys_in_flight", where, 0, 2**32 - 1)
    hbm = int(options.global_hbm_for_values or options.local_hbm_for_values)
    if hbm > 0:
        t.max_hbm_for_values = hbm
    e.table = t
    e.eval_initializer = _initializer(
        options.eval_initializer_args, num_embeddings, f"{where}.eval_initializer_args"
    )
    e.optimizer = optimizer_options(fused_params) if options.training else _C.OptimizerOptions()
    e.ttl_steps = int(options.ttl_steps)
    e.ttl_seconds = float(options.ttl_seconds)
    e.gradient_check = _C.SafeCheck.WARNING
    e.value_type = value_type
    e.stochastic_rounding = options.stochastic_rounding
    e.state_in_value_type = options.state_in_value_type
    e.output_type = output_type
    e.deterministic_backward = options.deterministic_backward
    if options.admit_strategy is not None:
        a = options.admit_strategy
        if not isinstance(a, FrequencyAdmissionStrategy):
            _not_available("admit_strategy", a, "FrequencyAdmissionStrategy is available")
        if a.initializer_args is not None:
            _not_available(
                "admit_strategy.initializer_args", a.initializer_args,
                "keys not admitted yet read eval_initializer_args",
            )
        e.admit_threshold = int(a.threshold)
        e.admission_capacity = int(a.counter_capacity)
    return e


def caching_options(options: DynamicEmbTableOptions, where: str) -> "_C.CachingOptions":
    """The compiled module's caching options (private_store and its filter's size,
    max_call_keys); raises InvalidArgument naming the field for a filter size out of [10, 32], a
    max_call_keys out of [0, 2^31 - 1] or private_store on a table with neither caching nor
    external_storage."""
    c = _C.CachingOptions()
    c.private_store = options.private_store
    c.filter_log2_bits = _whole_number(options, "private_store_filter_log2_bits", where, 10, 32)
    c.max_call_keys = _whole_number(options, "max_call_keys", where, 0, 2**31 - 1)
    if options.private_store and not options.caching and options.external_storage is None:
        raise _C.InvalidArgument(
            f"{where}: DynamicEmbTableOptions.private_store = True, but the table has no lower "
            "tier (caching = False and external_storage = None)"
        )
    return c


def storage_for(options: DynamicEmbTableOptions, e: "_C.EmbeddingOptions", name: str, where: str):
    """(lower tier, fast-tier rows) of a table with `caching` or `external_storage`, else
    (None, 0). Raises InvalidArgument naming the field for a budget under one row or a store
    that is not a dynemb.Storage."""
    external = options.external_storage
    if not options.caching and external is None:
        return None, 0
    row_dim = int(_C.embedding_row_dim(e))
    row_bytes = 4 * row_dim
    if options.caching:
        budget = int(options.global_hbm_for_values or options.local_hbm_for_values)
        if budget < row_bytes:
            raise _C.InvalidArgument(
                f"{where}: caching = True with global_hbm_for_values = {budget}; it sizes the "
                f"cache and must hold at least one row ({row_bytes} bytes: {row_dim} floats of "
                "embedding and optimizer state)"
            )
        cache_rows = budget // row_bytes
    else:
        cache_rows = int(e.table.max_capacity)
    if external is None:
        store = _C.HostStorage(row_dim, max_rows=int(e.table.max_capacity))
    elif isinstance(external, _C.Storage):
        store = external
    elif callable(external):
        store = external(name, row_dim)
        if not isinstance(store, _C.Storage):
            raise _C.InvalidArgument(
                f"{where}: external_storage({name!r}, {row_dim}) returned a "
                f"{type(store).__name__}, must return a dynemb.Storage"
            )
    else:
        raise _C.InvalidArgument(
            f"{where}: external_storage is a {type(external).__name__}, must be a dynemb.Storage "
            "or a callable (table name, row_dim) -> dynemb.Storage"
        )
    return store, cache_rows
