"""DynamicEmbDump / DynamicEmbLoad / incremental_dump / get_score / set_score round trips, and
`dynemb inspect` on a checkpoint written from Python."""

import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch import nn

import dynemb
from dynemb.torch import (
    DynamicEmbeddingBagCollection,
    EmbeddingBagConfig,
    KeyedJaggedTensor,
)

from conftest import all_rows, zipf_ids

ADAM = {"optimizer": dynemb.EmbOptimType.ADAM, "learning_rate": 0.01}


class TwoCollections(nn.Module):
    """A model with dynamic tables at two paths ("user_side", "item_side.ebc")."""

    def __init__(self, score=dynemb.DynamicEmbScoreStrategy.STEP):
        super().__init__()
        opts = dynemb.DynamicEmbTableOptions(score_strategy=score)
        self.user_side = DynamicEmbeddingBagCollection(
            [EmbeddingBagConfig(name="user", embedding_dim=8, num_embeddings=1000,
                                feature_names=["user"])], table_options=opts, fused_params=ADAM)
        self.item_side = nn.Module()
        self.item_side.ebc = DynamicEmbeddingBagCollection(
            [EmbeddingBagConfig(name="item", embedding_dim=4, num_embeddings=1000,
                                feature_names=["item"]),
             EmbeddingBagConfig(name="shop", embedding_dim=12, num_embeddings=1000,
                                feature_names=["shop"])], table_options=opts, fused_params=ADAM)

    def step(self, batch=32):
        kjts = []
        for ebc, keys in ((self.user_side, ["user"]), (self.item_side.ebc, ["item", "shop"])):
            lengths = torch.randint(0, 4, (batch * len(keys),))
            kjt = KeyedJaggedTensor(keys, zipf_ids(int(lengths.sum()), 1000), lengths=lengths)
            kt = ebc(kjt)
            kt.values().pow(2).sum().backward()
            kjts.append(kjt)
        return kjts


def tables_of(model):
    return {"user_side": model.user_side, "item_side.ebc": model.item_side.ebc}


def snapshot(model):
    out = {}
    for path, m in tables_of(model).items():
        for t in m.dynemb_tables():
            out[(path, t)] = all_rows(m, t)
    return out


def assert_same_rows(a, b, width=None):
    assert a.keys() == b.keys()
    for name in a:
        assert a[name].keys() == b[name].keys(), name
        for k in a[name]:
            x, y = a[name][k], b[name][k]
            if width is not None:
                x, y = x[:width[name]], y[:width[name]]
            assert torch.equal(x, y), (name, k)


def test_dump_load_round_trip_with_optimizer_state(seed, tmp_path):
    model = TwoCollections()
    for _ in range(3):
        model.step()
    path = tmp_path / "ckpt"
    dynemb.DynamicEmbDump(str(path), model, optim=True)
    fresh = TwoCollections()
    dynemb.DynamicEmbLoad(str(path), fresh, optim=True)
    assert_same_rows(snapshot(model), snapshot(fresh))
    assert dynemb.get_score(fresh) == dynemb.get_score(model)
    # Both train on identically from here.
    torch.manual_seed(seed + 1)
    model.step()
    torch.manual_seed(seed + 1)
    fresh.step()
    assert_same_rows(snapshot(model), snapshot(fresh))


def test_dump_without_optimizer_state_and_selected_tables(seed, tmp_path):
    model = TwoCollections()
    model.step()
    path = tmp_path / "ckpt"
    dynemb.DynamicEmbDump(str(path), model, table_names={"item_side.ebc": ["shop"]})
    manifest = dynemb._C.inspect(str(path))
    assert manifest["verified"], manifest["problem"]
    assert '"item_side.ebc.shop"' in manifest["manifest"]
    assert '"user_side.user"' not in manifest["manifest"]
    fresh = TwoCollections()
    dynemb.DynamicEmbLoad(str(path), fresh, table_names={"item_side.ebc": ["shop"]})
    got = all_rows(fresh.item_side.ebc, "shop")
    want = all_rows(model.item_side.ebc, "shop")
    assert got.keys() == want.keys()
    for k in got:  # embeddings equal; optimizer state starts at 0
        assert torch.equal(got[k][:12], want[k][:12])
        assert float(got[k][12:].abs().sum()) == 0.0
    assert len(all_rows(fresh.user_side, "user")) == 0


def test_inspect_reads_a_python_checkpoint(seed, tmp_path):
    program = os.environ.get("DYNEMB_PROGRAM")
    if not program or not Path(program).exists():
        pytest.skip("DYNEMB_PROGRAM (the dynemb program) not given")
    model = TwoCollections()
    model.step()
    path = tmp_path / "ckpt"
    dynemb.DynamicEmbDump(str(path), model, optim=True)
    run = subprocess.run([program, "inspect", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "verified: yes" in run.stdout
    for name in ("user_side.user", "item_side.ebc.item", "item_side.ebc.shop"):
        assert name in run.stdout
    # A damaged copy does not verify.
    values = next(p for p in path.rglob("*values*") if p.is_file())
    data = bytearray(values.read_bytes())
    data[-1] ^= 0xFF
    values.write_bytes(bytes(data))
    bad = subprocess.run([program, "inspect", str(path)], capture_output=True, text=True)
    assert bad.returncode != 0 and "verified: NO" in bad.stdout


def test_load_of_a_damaged_checkpoint_leaves_tables_unchanged(seed, tmp_path):
    model = TwoCollections()
    model.step()
    path = tmp_path / "ckpt"
    dynemb.DynamicEmbDump(str(path), model, optim=True)
    target = TwoCollections()
    target.step()
    before = snapshot(target)
    values = next(p for p in path.rglob("*values*") if p.is_file() and p.stat().st_size > 64)
    data = bytearray(values.read_bytes())
    data[-1] ^= 0xFF
    values.write_bytes(bytes(data))
    with pytest.raises(dynemb.CheckpointError):
        dynemb.DynamicEmbLoad(str(path), target, optim=True)
    assert_same_rows(before, snapshot(target))


def test_incremental_dump_returns_rows_touched_since_threshold(seed):
    model = TwoCollections(score=dynemb.DynamicEmbScoreStrategy.STEP)
    model.step()
    model.step()
    threshold = dynemb.get_score(model)
    kjts = model.step()
    deltas = dynemb.incremental_dump(model, threshold)
    assert set(deltas) == {"user_side", "item_side.ebc"}
    touched = {"user": set(kjts[0].values().tolist())}
    for key in ("item", "shop"):
        touched[key] = set(kjts[1].to_dict()[key].values().tolist())
    for path, m in tables_of(model).items():
        d = deltas[path]
        for i, t in enumerate(d.table_names):
            assert set(d.keys[i].tolist()) == touched[t], t
            rows = all_rows(m, t)
            h = m.dynemb_tables()[t]
            for j, k in enumerate(d.keys[i].tolist()):
                assert torch.equal(d.values[i][j], rows[k][: h.dim])
                assert torch.equal(d.optimizer_states[i][j],
                                   rows[k][h.dim: h.dim + h.optimizer_state_dim])
            assert d.meta[i]["current_score"] == dynemb.get_score(model)[path][t]
    # An int threshold applies to every table; nothing is newer than the current step.
    later = dynemb.incremental_dump(model, max(max(v.values()) for v in dynemb.get_score(model).values()) + 1)
    assert all(k.numel() == 0 for d in later.values() for k in d.keys)


def test_set_score_customized_scores_the_next_batches(seed):
    model = TwoCollections(score=dynemb.DynamicEmbScoreStrategy.CUSTOMIZED)
    dynemb.set_score(model, 10)
    model.step()
    dynemb.set_score(model, {"user_side": {"user": 50}, "item_side.ebc": {"item": 50, "shop": 50}})
    kjts = model.step()
    assert dynemb.get_score(model) == {"user_side": {"user": 50},
                                       "item_side.ebc": {"item": 50, "shop": 50}}
    deltas = dynemb.incremental_dump(model, {"user_side": {"user": 50}})
    assert list(deltas) == ["user_side"]
    assert set(deltas["user_side"].keys[0].tolist()) == set(kjts[0].values().tolist())
    assert set(deltas["user_side"].scores[0].view(-1).tolist()) <= {50}


def test_set_score_refuses_timestamp_tables(seed):
    model = TwoCollections(score=dynemb.DynamicEmbScoreStrategy.TIMESTAMP)
    with pytest.raises(dynemb.InvalidArgument, match="TIMESTAMP"):
        dynemb.set_score(model, 5)
