"""Checkpoints of every dynamic table in a model, with dynamicemb's function names.

A model's tables are found by walking its modules: each DynamicEmbModule at path P (the
module's name in model.named_modules(); "" for the model itself) contributes its tables, named
"P.table" in the checkpoint ("table" when P is ""). One call writes one checkpoint directory in
dynemb's verified format (docs/checkpoint_format.md): staged and renamed into place, every file
check-summed; `dynemb inspect PATH` reads it.
"""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import torch

from . import _C


def _require_no_pg(pg, where: str):
    if pg is not None:
        raise _C.NotAvailable(
            f"{where}: pg = {pg!r}, but the model holds no sharded collection (built with pg=); "
            "pass pg=None for this process's tables"
        )


def _sharded_groups(model, table_names, where: str):
    """When the model holds sharded collections: [(subdirectory, handle, names, selected names)]
    per group of tables, in the model's order (the same on every rank); else None. A model that
    mixes sharded and unsharded collections is refused."""
    collections = _collections(model)
    sharded = [(p, m) for p, m in collections if m.is_sharded]
    if not sharded:
        return None
    if len(sharded) != len(collections):
        raise _C.NotAvailable(
            f"{where}: the model mixes sharded collections {[p for p, _ in sharded]} with "
            "unsharded ones; checkpoint them separately"
        )
    every = [_checkpoint_name(p, t.name) for p, m in sharded for t in m._tables]
    if table_names is None:
        wanted = set(every)
    elif isinstance(table_names, dict):
        wanted = {_checkpoint_name(p, t) for p, ts in table_names.items() for t in ts}
    else:
        wanted = {_checkpoint_name(p, t) for p, m in sharded for t in m._tables
                  if t.name in set(table_names)} | (set(table_names) & set(every))
    unknown = sorted(wanted - set(every))
    if unknown:
        raise _C.InvalidArgument(f"{where}: table_names names table(s) {unknown} the model "
                                 f"does not have (it has {sorted(every)})")
    groups = []
    for p, m in sharded:
        for g in m._groups:
            names = [_checkpoint_name(p, t.name) for t in g.tables]
            picked = [n for n in names if n in wanted]
            if picked:
                groups.append((names[0], g.handle, names, picked))
    return groups


def _collections(model: torch.nn.Module):
    from .torch.modules import DynamicEmbModule

    if not isinstance(model, torch.nn.Module):
        raise _C.InvalidArgument(f"model is a {type(model).__name__}, must be a torch.nn.Module")
    return [(path, m) for path, m in model.named_modules() if isinstance(m, DynamicEmbModule)]


def _checkpoint_name(path: str, table: str) -> str:
    return f"{path}.{table}" if path else table


def _selected(model, table_names, where: str):
    """[(collection path, table name, handle)] of the tables `table_names` selects: None =
    every table; a dict {collection path: [table, ...]}; a list of table names (any collection).
    Names that match nothing raise InvalidArgument."""
    collections = _collections(model)
    if not collections:
        raise _C.InvalidArgument(f"{where}: the model holds no dynemb tables")
    everything = [(p, name, h) for p, m in collections for name, h in m.dynemb_tables().items()]
    if table_names is None:
        return everything
    if isinstance(table_names, dict):
        paths = {p for p, _ in collections}
        unknown = sorted(set(table_names) - paths)
        if unknown:
            raise _C.InvalidArgument(
                f"{where}: table_names names collection(s) {unknown} the model does not have "
                f"(it has {sorted(paths)})"
            )
        picked = []
        for p, m in collections:
            if p not in table_names:
                continue
            tables = m.dynemb_tables()
            wanted = list(table_names[p])
            missing = [t for t in wanted if t not in tables]
            if missing:
                raise _C.InvalidArgument(
                    f"{where}: table_names['{p}'] names table(s) {missing} the collection does not "
                    f"have (it has {sorted(tables)})"
                )
            picked += [(p, t, tables[t]) for t in wanted]
        return picked
    wanted = list(table_names)
    picked = [e for e in everything if e[1] in wanted]
    missing = sorted(set(wanted) - {e[1] for e in picked})
    if missing:
        raise _C.InvalidArgument(
            f"{where}: table_names names table(s) {missing} the model does not have "
            f"(it has {sorted({e[1] for e in everything})})"
        )
    return picked


def DynamicEmbDump(path: str, model: torch.nn.Module,
                   table_names: Optional[Union[Dict[str, List[str]], List[str]]] = None,
                   optim: bool = False, pg: Any = None) -> None:
    """Writes the model's dynamic tables (all, or those table_names selects) to the checkpoint
    directory `path`, with their optimizer state when optim. A checkpoint already at `path` is
    replaced only once the new one is complete.

    Sharded collections (built with pg=): collective, every rank calls it with the same
    arguments and writes its own shards at once; `path` is then a directory holding one
    sharded checkpoint per group of tables (named after the group's first table), each
    replaced atomically. `pg` is accepted for dynamicemb's signature: the collections' own
    groups are used."""
    groups = _sharded_groups(model, table_names, "DynamicEmbDump")
    if groups is not None:
        os.makedirs(str(path), exist_ok=True)
        for sub, handle, names, picked in groups:
            handle.dump(os.path.join(str(path), sub), names, bool(optim), None,
                        [] if picked == names else picked)
        return
    _require_no_pg(pg, "DynamicEmbDump")
    tables = _selected(model, table_names, "DynamicEmbDump")
    _C.dump(str(path), [(_checkpoint_name(p, t), h) for p, t, h in tables], bool(optim))


def DynamicEmbLoad(path: str, model: torch.nn.Module,
                   table_names: Optional[Union[Dict[str, List[str]], List[str]]] = None,
                   optim: bool = False, pg: Any = None) -> None:
    """Loads the checkpoint at `path` into the model's dynamic tables (all, or those table_names
    selects), replacing their rows; optimizer state too when optim (and the optimizers match).
    The checkpoint is verified first: a missing table, a bad file or a dim that differs raises
    and leaves every table unchanged.

    Sharded collections: collective; each rank loads the rows it owns from the checkpoint
    DynamicEmbDump wrote at any world size (keys re-routed)."""
    groups = _sharded_groups(model, table_names, "DynamicEmbLoad")
    if groups is not None:
        for sub, handle, names, picked in groups:
            handle.load(os.path.join(str(path), sub), names, bool(optim),
                        [] if picked == names else picked)
        return
    _require_no_pg(pg, "DynamicEmbLoad")
    tables = _selected(model, table_names, "DynamicEmbLoad")
    _C.load(str(path), [(_checkpoint_name(p, t), h) for p, t, h in tables], bool(optim))


@dataclass
class DeltaDumpResult:
    """One collection's incremental dump: per table (element i is table_names[i]) the keys,
    embeddings [n, dim], optimizer state [n, state] (None without state), scores [n, 1] (int64 holding the uint64 scores) and
    meta {"current_score": the threshold for the next dump}. Host tensors."""

    table_names: List[str] = field(default_factory=list)
    keys: List[torch.Tensor] = field(default_factory=list)
    values: List[torch.Tensor] = field(default_factory=list)
    optimizer_states: List[Optional[torch.Tensor]] = field(default_factory=list)
    scores: List[torch.Tensor] = field(default_factory=list)
    meta: List[Dict[str, Any]] = field(default_factory=list)


def _threshold_of(score_threshold, path: str, table: str, where: str) -> int:
    if isinstance(score_threshold, dict):
        return int(score_threshold[path][table])
    if isinstance(score_threshold, bool) or not isinstance(score_threshold, int):
        raise _C.InvalidArgument(
            f"{where}: score_threshold = {score_threshold!r}, must be an int or "
            "{collection: {table: int}}"
        )
    if score_threshold < 0:
        raise _C.InvalidArgument(f"{where}: score_threshold = {score_threshold}, must be >= 0")
    return score_threshold


def incremental_dump(model: torch.nn.Module,
                     score_threshold: Union[int, Dict[str, Dict[str, int]]],
                     pg: Any = None) -> Dict[str, DeltaDumpResult]:
    """The rows whose score >= the threshold (one int for every table, or per collection and
    table: only the tables named), per collection. Sharded collections: this rank's shard."""
    collections = _collections(model)
    if any(m.is_sharded for _, m in collections):
        if not all(m.is_sharded for _, m in collections):
            raise _C.NotAvailable("incremental_dump: the model mixes sharded and unsharded "
                                  "collections; dump them separately")
        return _sharded_incremental_dump(collections, score_threshold)
    _require_no_pg(pg, "incremental_dump")
    names = None
    if isinstance(score_threshold, dict):
        names = {p: list(t) for p, t in score_threshold.items()}
    result: Dict[str, DeltaDumpResult] = {}
    for p, t, h in _selected(model, names, "incremental_dump"):
        threshold = _threshold_of(score_threshold, p, t, "incremental_dump")
        keys, rows, scores, next_threshold = h.export_rows(threshold)
        keys = torch.from_dlpack(keys)
        rows = torch.from_dlpack(rows)
        scores = torch.from_dlpack(scores)
        d = result.setdefault(p, DeltaDumpResult())
        d.table_names.append(t)
        d.keys.append(keys)
        d.values.append(rows[:, : h.dim].clone())
        state = h.optimizer_state_dim
        d.optimizer_states.append(rows[:, h.dim: h.dim + state].clone() if state else None)
        d.scores.append(scores.view(-1, 1))
        d.meta.append({"current_score": int(next_threshold), "row_dim": h.row_dim})
    return result


def _sharded_incremental_dump(collections, score_threshold):
    result: Dict[str, DeltaDumpResult] = {}
    for p, m in collections:
        if isinstance(score_threshold, dict) and p not in score_threshold:
            continue
        for t in m._tables:
            if isinstance(score_threshold, dict) and t.name not in score_threshold[p]:
                continue
            threshold = _threshold_of(score_threshold, p, t.name, "incremental_dump")
            keys, rows, scores, next_threshold = t.group.handle.export_rows(t.index, threshold)
            dim, row_dim = t.dim, t.group.handle.row_dim
            state = t.group.handle.optimizer_state_dim
            keys, rows = torch.from_dlpack(keys), torch.from_dlpack(rows)
            scores = torch.from_dlpack(scores)
            d = result.setdefault(p, DeltaDumpResult())
            d.table_names.append(t.name)
            d.keys.append(keys)
            d.values.append(rows[:, :dim].clone())
            d.optimizer_states.append(rows[:, dim: dim + state].clone() if state else None)
            d.scores.append(scores.view(-1, 1))
            d.meta.append({"current_score": int(next_threshold), "row_dim": row_dim})
    return result


def get_score(model: torch.nn.Module) -> Optional[Dict[str, Dict[str, int]]]:
    """Each table's clock: the score its next batch writes (STEP: the step; CUSTOMIZED: the
    score set; TIMESTAMP: the last time read, ns), per collection; None without tables."""
    collections = _collections(model)
    if not collections:
        return None
    return {p: {t: int(s["score"]) for t, s in m.table_stats().items()} for p, m in collections}


def set_score(model: torch.nn.Module, table_score: Union[int, Dict[str, Dict[str, int]]]) -> None:
    """Sets the score the next batches write (CUSTOMIZED) or the step (STEP): one int for every
    table, or per collection and table. TIMESTAMP and LFU tables have no settable score."""
    names = None
    if isinstance(table_score, dict):
        names = {p: list(t) for p, t in table_score.items()}
    if any(m.is_sharded for _, m in _collections(model)):
        return _sharded_set_score(model, table_score)
    selected = _selected(model, names, "set_score")
    values = []
    for p, t, h in selected:
        v = _threshold_of(table_score, p, t, "set_score")
        if h.score_policy not in (_C.ScorePolicy.STEP, _C.ScorePolicy.CUSTOMIZED):
            raise _C.InvalidArgument(
                f"set_score: table '{_checkpoint_name(p, t)}' has score_strategy "
                f"{h.score_policy.name}; only STEP and CUSTOMIZED tables take a score"
            )
        values.append((h, v))
    for h, v in values:
        h.score = v


def _sharded_set_score(model, table_score):
    """set_score on sharded collections: every rank sets its shard's clock (call it on every
    rank with the same value)."""
    updates = []
    for p, m in _collections(model):
        if not m.is_sharded:
            raise _C.NotAvailable("set_score: the model mixes sharded and unsharded collections")
        for t in m._tables:
            if isinstance(table_score, dict) and t.name not in table_score.get(p, {}):
                continue
            v = _threshold_of(table_score, p, t.name, "set_score")
            policy = t.compiled_options.table.score_policy
            if policy not in (_C.ScorePolicy.STEP, _C.ScorePolicy.CUSTOMIZED):
                raise _C.InvalidArgument(
                    f"set_score: table '{_checkpoint_name(p, t.name)}' has score_strategy "
                    f"{policy.name}; only STEP and CUSTOMIZED tables take a score"
                )
            updates.append((t, v))
    for t, v in updates:
        t.group.handle.set_score(t.index, v)
