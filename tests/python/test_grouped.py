"""group_tables=True: tables of one row layout and pooling mode run as one C++
EmbeddingCollection. Against the same collection with one compiled table per table: the same
outputs and rows bit for bit over several training steps, checkpoints interchangeable, tables
that cannot join a group (caching, admission) running alone beside the groups."""

import pytest
import torch

import dynemb
from conftest import DEVICES, all_rows, zipf_ids
from dynemb.torch import (
    DynamicEmbeddingBagCollection,
    DynamicEmbeddingCollection,
    EmbeddingBagConfig,
    EmbeddingConfig,
    KeyedJaggedTensor,
)

ADAM = {"optimizer": "adam", "learning_rate": 0.05, "eps": 1e-6}
UNIVERSE = 500


def bag_configs():
    return [
        EmbeddingBagConfig(name="a", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fa", "fa2"]),
        EmbeddingBagConfig(name="b", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fb"]),
        EmbeddingBagConfig(name="c", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fc"], pooling="MEAN"),
        EmbeddingBagConfig(name="d", embedding_dim=4, num_embeddings=UNIVERSE,
                           feature_names=["fd"]),
    ]


def batch(keys, bags, gen, device, weighted=False):
    lengths = torch.randint(0, 5, (len(keys) * bags,), generator=gen)
    values = zipf_ids(int(lengths.sum()), UNIVERSE, gen)
    weights = torch.rand(values.numel(), generator=gen) if weighted else None
    return KeyedJaggedTensor(keys, values.to(device), lengths=lengths.to(device),
                             weights=None if weights is None else weights.to(device))


def same_rows(x, y, tables):
    for t in tables:
        want, got = all_rows(y, t), all_rows(x, t)
        assert sorted(got) == sorted(want), t
        for k in want:
            assert torch.equal(got[k], want[k]), f"table {t} key {k}: {got[k]} != {want[k]}"


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_bag_collection_matches_separate_tables(seed, device, tmp_path):
    grouped = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device,
                                            group_tables=True)
    separate = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device)
    # a and b share dim and mode: one collection; c (MEAN) and d (dim 4) each their own.
    assert [len(g.tables) for g in grouped._groups] == [2, 1, 1]
    gen = torch.Generator().manual_seed(seed)
    keys = ["fd", "fa", "fc", "fb", "fa2"]
    for step in range(5):
        kjt = batch(keys, 6, gen, device)
        out_g, out_s = grouped(kjt).values(), separate(kjt).values()
        torch.testing.assert_close(out_g, out_s, rtol=0, atol=0,
                                   msg=lambda m: f"step {step}: {m}")
        ups = torch.randn(out_s.shape, generator=gen).to(device)
        (out_g * ups).sum().backward()
        (out_s * ups).sum().backward()
    same_rows(grouped, separate, "abcd")
    for t in "abcd":
        g, s = grouped.table_stats()[t], separate.table_stats()[t]
        assert g["size"] == s["size"] and g["lookups"] == s["lookups"], (t, g, s)
    # Checkpoints go both ways: grouped -> separate and separate -> grouped.
    dynemb.DynamicEmbDump(str(tmp_path / "g"), grouped, optim=True)
    back = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device)
    dynemb.DynamicEmbLoad(str(tmp_path / "g"), back, optim=True)
    same_rows(back, separate, "abcd")
    dynemb.DynamicEmbDump(str(tmp_path / "s"), separate, optim=True)
    regrouped = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device,
                                              group_tables=True)
    dynemb.DynamicEmbLoad(str(tmp_path / "s"), regrouped, optim=True)
    same_rows(regrouped, separate, "abcd")


def test_grouped_weighted_and_sequence_collections(seed):
    configs = [EmbeddingBagConfig(name=n, embedding_dim=8, num_embeddings=UNIVERSE,
                                  feature_names=[n]) for n in ("x", "y", "z")]
    grouped = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, is_weighted=True,
                                            group_tables=True)
    separate = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, is_weighted=True)
    assert len(grouped._groups) == 1
    seq_configs = [EmbeddingConfig(name=n, embedding_dim=4, num_embeddings=UNIVERSE,
                                   feature_names=[n]) for n in ("p", "q")]
    seq_g = DynamicEmbeddingCollection(seq_configs, fused_params=ADAM, group_tables=True)
    seq_s = DynamicEmbeddingCollection(seq_configs, fused_params=ADAM)
    gen = torch.Generator().manual_seed(seed)
    for step in range(4):
        kjt = batch(["x", "y", "z"], 5, gen, "cpu", weighted=True)
        a, b = grouped(kjt).values(), separate(kjt).values()
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        (a * a).sum().backward()
        (b * b).sum().backward()
        kjt = batch(["p", "q"], 5, gen, "cpu")
        ja, jb = seq_g(kjt), seq_s(kjt)
        loss_a = sum((ja[f].values() ** 2).sum() for f in ("p", "q"))
        loss_b = sum((jb[f].values() ** 2).sum() for f in ("p", "q"))
        for f in ("p", "q"):
            torch.testing.assert_close(ja[f].values(), jb[f].values(), rtol=0, atol=0)
        loss_a.backward()
        loss_b.backward()
    same_rows(grouped, separate, "xyz")
    same_rows(seq_g, seq_s, "pq")


def test_tables_that_cannot_join_a_group_run_alone(seed):
    plain = DynamicEmbeddingBagCollection(
        [EmbeddingBagConfig(name="probe", embedding_dim=8, num_embeddings=UNIVERSE)],
        fused_params=ADAM)
    row_dim = plain.dynemb_tables()["probe"].row_dim
    options = {
        "a": dynemb.DynamicEmbTableOptions(),
        "b": dynemb.DynamicEmbTableOptions(caching=True, bucket_capacity=16,
                                           global_hbm_for_values=256 * 4 * row_dim),
        "c": dynemb.DynamicEmbTableOptions(
            admit_strategy=dynemb.FrequencyAdmissionStrategy(threshold=2)),
        "d": dynemb.DynamicEmbTableOptions(),
    }
    configs = [EmbeddingBagConfig(name=n, embedding_dim=8, num_embeddings=UNIVERSE,
                                  feature_names=[n]) for n in "abcd"]
    grouped = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, table_options=options,
                                            group_tables=True)
    separate = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, table_options=options)
    assert sorted(len(g.tables) for g in grouped._groups) == [1, 1, 2]
    assert grouped.caching_stats()["b"] is not None and grouped.caching_stats()["a"] is None
    gen = torch.Generator().manual_seed(seed)
    for step in range(4):
        kjt = batch(list("abcd"), 6, gen, "cpu")
        a, b = grouped(kjt).values(), separate(kjt).values()
        torch.testing.assert_close(a, b, rtol=0, atol=0)
        (a * a).sum().backward()
        (b * b).sum().backward()
    same_rows(grouped, separate, "abcd")


def test_grouped_state_errors_change_nothing(seed):
    grouped = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, group_tables=True)
    gen = torch.Generator().manual_seed(seed)
    keys = ["fa", "fa2", "fb", "fc", "fd"]
    out = grouped(batch(keys, 4, gen, "cpu")).values()
    out.sum().backward(retain_graph=True)
    before = {t: all_rows(grouped, t) for t in "abcd"}
    with pytest.raises(dynemb.StateError, match="no training forward awaits"):
        out.sum().backward()
    for t in "abcd":
        after = all_rows(grouped, t)
        assert all(torch.equal(before[t][k], after[k]) for k in before[t])


@pytest.mark.skipif(not (torch.cuda.is_available() and torch.cuda.device_count() >= 2
                         and dynemb._C.cuda_available()),
                    reason="needs 2 CUDA devices and a CUDA build")
def test_cuda_module_on_second_device_while_first_is_current(seed):
    """A collection built on cuda:1 trains while cuda:0 is current, as its twin on cuda:0."""
    torch.cuda.set_device(0)
    twins = {d: DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=d,
                                              group_tables=True)
             for d in ("cuda:0", "cuda:1")}
    gen = torch.Generator().manual_seed(seed)
    for step in range(3):
        kjt = batch(["fa", "fa2", "fb", "fc", "fd"], 6, gen, "cpu")
        outs = {}
        for d, m in twins.items():
            k = KeyedJaggedTensor(kjt.keys(), kjt.values().to(d), lengths=kjt.lengths().to(d))
            outs[d] = m(k).values()
            (outs[d] ** 2).sum().backward()
        torch.testing.assert_close(outs["cuda:1"].cpu(), outs["cuda:0"].cpu(), rtol=0, atol=0)
    assert torch.cuda.current_device() == 0
    same_rows(twins["cuda:1"], twins["cuda:0"], "abcd")
