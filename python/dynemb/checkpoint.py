"""Checkpoints of every dynamic table in a model, with dynamicemb's function names.

A model's tables are found by walking its modules: each DynamicEmbModule at path P (the
module's name in model.named_modules(); "" for the model itself) contributes its tables, named
"P.table" in the checkpoint ("table" when P is ""). One call writes one checkpoint directory in
dynemb's verified format (docs/checkpoint_format.md): staged and renamed into place, every file
check-summed; `dynemb inspect PATH` reads it.
"""

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union

import torch

from . import _C


def _require_no_pg(pg, where: str):
    if pg is not None:
        raise _C.NotAvailable(
            f"{where}: pg = {pg!r}: process groups (sharded tables) are not available yet; "
            "pass pg=None for this process's tables"
        )


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
    replaced only once the new one is complete."""
    _require_no_pg(pg, "DynamicEmbDump")
    tables = _selected(model, table_names, "DynamicEmbDump")
    _C.dump(str(path), [(_checkpoint_name(p, t), h) for p, t, h in tables], bool(optim))


def DynamicEmbLoad(path: str, model: torch.nn.Module,
                   table_names: Optional[Union[Dict[str, List[str]], List[str]]] = None,
                   optim: bool = False, pg: Any = None) -> None:
    """Loads the checkpoint at `path` into the model's dynamic tables (all, or those table_names
    selects), replacing their rows; optimizer state too when optim (and the optimizers match).
    The checkpoint is verified first: a missing table, a bad file or a dim that differs raises
    and leaves every table unchanged."""
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
    table: only the tables named), per collection."""
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


def get_score(model: torch.nn.Module) -> Optional[Dict[str, Dict[str, int]]]:
    """Each table's clock: the score its next batch writes (STEP: the step; CUSTOMIZED: the
    score set; TIMESTAMP: the last time read, ns), per collection; None without tables."""
    collections = _collections(model)
    if not collections:
        return None
    return {p: {t: int(h.score) for t, h in m.dynemb_tables().items()} for p, m in collections}


def set_score(model: torch.nn.Module, table_score: Union[int, Dict[str, Dict[str, int]]]) -> None:
    """Sets the score the next batches write (CUSTOMIZED) or the step (STEP): one int for every
    table, or per collection and table. TIMESTAMP and LFU tables have no settable score."""
    names = None
    if isinstance(table_score, dict):
        names = {p: list(t) for p, t in table_score.items()}
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
