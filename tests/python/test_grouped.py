"""group_tables=True: tables of one row layout and pooling mode run as one C++
EmbeddingCollection. Against the same collection with one compiled table per table: the same
outputs and rows bit for bit over several training steps, checkpoints interchangeable, tables
that cannot join a group (caching, admission) running alone beside the groups."""

import pytest
import torch

import dynemb
from conftest import DEVICES, all_rows, same_rows, train_alike, zipf_ids
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


@pytest.mark.parametrize("device", DEVICES)
def test_grouped_bag_collection_matches_separate_tables(seed, device, tmp_path):
    grouped = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device,
                                            group_tables=True)
    separate = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, device=device)
    # a and b share dim and mode: one collection; c (MEAN) and d (dim 4) each their own.
    assert [len(g.tables) for g in grouped._groups] == [2, 1, 1]
    gen = torch.Generator().manual_seed(seed)
    keys = ["fd", "fa", "fc", "fb", "fa2"]
    train_alike(grouped, separate, (batch(keys, 6, gen, device) for _ in range(5)), gen, device)
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


@pytest.mark.parametrize("device", DEVICES)
def test_packed_batches_follow_separate_tables(seed, device):
    """Keys in the tables' order: every group runs from three tensors (forward_packed), its
    pieces handed out in the module's feature order; gradients as one buffer, as slices of
    one, or missing for some features give the separate tables' rows bit for bit."""
    configs = [bag_configs()[i] for i in (0, 3, 1, 2)]  # a, d, b, c: groups [a, b], [d], [c]
    grouped = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, device=device,
                                            group_tables=True)
    separate = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, device=device)
    keys = ["zz", "fa", "fa2", "fd", "fb", "fc"]  # zz: read by no table (its ids skipped)
    gen = torch.Generator().manual_seed(seed)
    for step in range(6):
        kjt = batch(keys, 6, gen, device)
        kt_g, kt_s = grouped(kjt), separate(kjt)
        plan = grouped._plan_cache[1]
        assert plan.packed and plan.order is not None
        torch.testing.assert_close(kt_g.values(), kt_s.values(), rtol=0, atol=0,
                                   msg=lambda m: f"step {step}: {m}")
        losses = []
        for kt in (kt_g, kt_s):
            d = kt.to_dict()
            if step % 3 == 0:  # every feature, through the concatenated values
                ups = torch.randn(kt.values().shape, generator=torch.Generator().manual_seed(step))
                losses.append((kt.values() * ups.to(device)).sum())
            elif step % 3 == 1:  # the dim-8 sums one after the other: slices of one gradient
                losses.append(torch.cat([d["fa"], d["fa2"], d["fb"]]).pow(2).sum())
            else:  # one feature: the others' gradients are missing (zeros)
                losses.append(d["fb"].pow(2).sum())
        for loss in losses:
            loss.backward()
    same_rows(grouped, separate, "abcd")


def test_offset_per_key_that_disagrees_with_the_offsets_changes_nothing(seed):
    grouped = DynamicEmbeddingBagCollection(bag_configs(), fused_params=ADAM, group_tables=True)
    keys = ["fa", "fa2", "fb", "fc", "fd"]
    gen = torch.Generator().manual_seed(seed)
    good = batch(keys, 4, gen, "cpu")
    grouped(good).values().sum().backward()
    before = {t: all_rows(grouped, t) for t in "abcd"}
    starts = good.offset_per_key()
    wrong = list(starts)
    wrong[2] += 1  # fb's first id one later than the offsets say
    if wrong[2] > wrong[3]:
        wrong[3] = wrong[2]
    bad = KeyedJaggedTensor(keys, good.values(), lengths=good.lengths(), offset_per_key=wrong)
    with pytest.raises(dynemb.InvalidArgument, match="offsets"):
        grouped(bad)
    short = KeyedJaggedTensor(keys, good.values(), lengths=good.lengths(),
                              offset_per_key=starts[:-1])
    with pytest.raises(dynemb.InvalidArgument, match="offset_per_key"):
        grouped(short)
    for t in "abcd":
        after = all_rows(grouped, t)
        assert sorted(after) == sorted(before[t])
        assert all(torch.equal(before[t][k], after[k]) for k in before[t])


def test_forward_packed_refuses_bad_cuts(seed):
    grouped = DynamicEmbeddingBagCollection(
        [EmbeddingBagConfig(name=n, embedding_dim=4, num_embeddings=UNIVERSE,
                            feature_names=[n]) for n in ("x", "y")],
        fused_params=ADAM, group_tables=True)
    handle = grouped._groups[0].handle
    ids = torch.arange(6, dtype=torch.int64)
    offsets = torch.tensor([0, 1, 3, 0, 2, 3], dtype=torch.int64)  # x: [0,1,3] y: [0,2,3]
    out = torch.empty(4, 4)
    SUM = dynemb._C.PoolingMode.SUM
    handle.forward_packed(ids, offsets, None, [0, 3, 3, 6], [2, 2], SUM, False, out)
    cases = [
        (([0, 3, 3], [2, 2]), "id_ranges: 3 entries"),
        (([0, 3, 3, 7], [2, 2]), r"id_ranges\[2, 3\] = \[3, 7\)"),
        (([3, 0, 3, 6], [2, 2]), r"id_ranges\[0, 1\] = \[3, 0\)"),
        (([0, 3, 3, 6], [2, 3]), r"bags\[1\] = 3"),
        (([0, 3, 3, 6], [1, 2]), "offsets: shape\\[0\\] = 6, must be 5"),
        (([0, 3, 3, 6], [2]), "bags: 1"),
    ]
    for (id_ranges, bags), message in cases:
        with pytest.raises(dynemb.InvalidArgument, match=message):
            handle.forward_packed(ids, offsets, None, id_ranges, bags, SUM, False, out)
    with pytest.raises(dynemb.InvalidArgument, match="per_sample_weights: shape"):
        handle.forward_packed(ids, offsets, torch.ones(5), [0, 3, 3, 6], [2, 2], SUM, False, out)
    with pytest.raises(dynemb.InvalidArgument, match="out: shape"):
        handle.forward_packed(ids, offsets, None, [0, 3, 3, 6], [2, 2], SUM, False,
                              torch.empty(3, 4))
    # Offsets that do not start at 0 for a table: refused by the collection's own check.
    with pytest.raises(dynemb.InvalidArgument, match="offsets"):
        handle.forward_packed(ids, offsets + 1, None, [0, 3, 3, 6], [2, 2], SUM, False, out)
