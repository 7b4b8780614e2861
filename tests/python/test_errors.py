"""Bad inputs raise Python exceptions carrying the C++ message, naming the argument, and leave
the tables unchanged."""

import pytest
import torch

import dynemb
from dynemb.torch import (
    DynamicEmbeddingBag,
    DynamicEmbeddingBagCollection,
    EmbeddingBagConfig,
    KeyedJaggedTensor,
)

from conftest import all_rows


def trained_bag():
    m = DynamicEmbeddingBag(100, 4, fused_params={"optimizer": "adam"})
    out = m(torch.randint(0, 100, (8, 3)))
    out.sum().backward()
    return m


def ids():
    return torch.randint(0, 100, (12,))


BAD_CALLS = [
    ("indices", lambda m: m(ids().float(), torch.arange(0, 12, 3))),
    ("indices", lambda m: m(torch.randint(0, 100, (24,))[::2], torch.arange(0, 12, 3))),
    ("offsets", lambda m: m(ids(), torch.arange(0, 12, 3).float())),
    ("offsets", lambda m: m(ids(), torch.tensor([0, 5, 3]))),
    ("offsets", lambda m: m(ids(), torch.tensor([0, 3, 20]))),
    ("offsets", lambda m: m(ids(), torch.tensor([2, 3, 6]))),
    ("per_sample_weights", lambda m: m(ids(), torch.arange(0, 12, 3),
                                       per_sample_weights=torch.rand(11))),
    ("per_sample_weights", lambda m: m(ids(), torch.arange(0, 12, 3),
                                       per_sample_weights=torch.rand(12, dtype=torch.float64))),
    ("per_sample_weights", lambda m: m(ids(), torch.arange(0, 12, 3),
                                       per_sample_weights=torch.rand(12, requires_grad=True))),
    ("input", lambda m: m(torch.zeros(2, 2, 2, dtype=torch.int64))),
    ("offsets", lambda m: m(ids())),
    ("input", lambda m: m([1, 2, 3], torch.tensor([0]))),
]


@pytest.mark.parametrize("name,call", BAD_CALLS,
                         ids=[f"{i}-{c[0]}" for i, c in enumerate(BAD_CALLS)])
def test_bad_input_names_the_argument_and_changes_nothing(seed, name, call):
    m = trained_bag()
    before = all_rows(m)
    stats = m.table_stats()["table"]
    with pytest.raises(dynemb.InvalidArgument, match=name) as info:
        call(m)
    assert isinstance(info.value, ValueError)
    after = all_rows(m)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert m.table_stats()["table"]["size"] == stats["size"]


def test_keyed_batch_errors_name_the_features(seed):
    ebc = DynamicEmbeddingBagCollection(
        [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=50, feature_names=["f"])])
    kjt = KeyedJaggedTensor(["g"], torch.tensor([1, 2]), lengths=torch.tensor([1, 1]))
    with pytest.raises(dynemb.InvalidArgument, match="features"):
        ebc(kjt)
    with pytest.raises(dynemb.InvalidArgument, match="features"):
        ebc(torch.tensor([1, 2]))


def test_backward_of_a_stale_forward_raises_and_changes_nothing(seed):
    m = trained_bag()
    first = m(torch.randint(0, 100, (4, 2)))
    second = m(torch.randint(0, 100, (4, 2)))
    before = all_rows(m)
    with pytest.raises(RuntimeError, match="training forward"):
        first.sum().backward()
    after = all_rows(m)
    assert all(torch.equal(before[k], after[k]) for k in before)
    second.sum().backward()  # the last forward's step still applies


def test_module_moved_to_another_device_raises(seed):
    m = trained_bag()
    m.to(torch.device("meta"))
    with pytest.raises(dynemb.StateError, match="moved"):
        m(torch.randint(0, 100, (2, 2)))


@pytest.mark.parametrize("field,value", [
    ("score_strategy", dynemb.DynamicEmbScoreStrategy.NO_EVICTION),
    ("score_function", lambda scores, now: 0.0),
    ("index_type", torch.int32),
    ("evicted_item_mode", dynemb.EvictedItemMode.RETAIN_KEY),
])
def test_options_not_available_yet_raise_at_construction(field, value):
    opts = dynemb.DynamicEmbTableOptions(**{field: value})
    with pytest.raises(dynemb.NotAvailable, match=field):
        DynamicEmbeddingBag(100, 4, table_options=opts)


@pytest.mark.parametrize("value", [-1, 1.5, True, "16384"])
def test_bad_coalesce_copies_min_batch_names_the_field(value):
    opts = dynemb.DynamicEmbTableOptions(coalesce_copies_min_batch=value)
    with pytest.raises(dynemb.InvalidArgument, match="coalesce_copies_min_batch"):
        DynamicEmbeddingBag(100, 4, table_options=opts)


def test_coalesce_copies_min_batch_reaches_the_table_options():
    from dynemb.options import to_embedding_options

    unset = to_embedding_options(dynemb.DynamicEmbTableOptions(), 4, 100, None, 0, "t")
    assert unset.table.coalesce_copies_min_batch is None
    for value in (0, 16384, 2**63):
        e = to_embedding_options(
            dynemb.DynamicEmbTableOptions(coalesce_copies_min_batch=value), 4, 100, None, 0, "t")
        assert e.table.coalesce_copies_min_batch == value


def test_out_of_range_options_name_the_field():
    with pytest.raises(dynemb.InvalidArgument, match="bucket_capacity"):
        DynamicEmbeddingBag(100, 4, table_options=dynemb.DynamicEmbTableOptions(bucket_capacity=3))
    with pytest.raises(dynemb.InvalidArgument, match="learning_rate"):
        DynamicEmbeddingBag(100, 4, fused_params={"optimizer": "adam", "learning_rate": -1.0})
    with pytest.raises(dynemb.InvalidArgument, match="fused_params"):
        DynamicEmbeddingBag(100, 4, fused_params={"lr": 0.1})
    # caching: the budget sizes the cache and must hold one row; a store must be a Storage of
    # the table's row width.
    with pytest.raises(dynemb.InvalidArgument, match="global_hbm_for_values = 0"):
        DynamicEmbeddingBag(100, 4, table_options=dynemb.DynamicEmbTableOptions(caching=True))
    with pytest.raises(dynemb.InvalidArgument, match="external_storage is a object"):
        DynamicEmbeddingBag(100, 4, table_options=dynemb.DynamicEmbTableOptions(
            external_storage=object()))
    with pytest.raises(dynemb.InvalidArgument, match="returned a int"):
        DynamicEmbeddingBag(100, 4, table_options=dynemb.DynamicEmbTableOptions(
            external_storage=lambda name, row_dim: 3))
    with pytest.raises(dynemb.InvalidArgument, match="row_dim 5, must be the table's row width"):
        DynamicEmbeddingBag(100, 4, table_options=dynemb.DynamicEmbTableOptions(
            external_storage=dynemb.HostStorage(5)))


def test_process_groups_are_not_available_yet(tmp_path):
    m = trained_bag()
    with pytest.raises(dynemb.NotAvailable, match="pg"):
        dynemb.DynamicEmbDump(str(tmp_path / "c"), m, pg=object())
    with pytest.raises(dynemb.NotAvailable, match="pg"):
        dynemb.incremental_dump(m, 0, pg=object())


def test_mismatched_table_names_raise(tmp_path):
    m = trained_bag()
    with pytest.raises(dynemb.InvalidArgument, match="table_names"):
        dynemb.DynamicEmbDump(str(tmp_path / "c"), m, table_names=["nope"])
    with pytest.raises(dynemb.InvalidArgument, match="table_names"):
        dynemb.DynamicEmbDump(str(tmp_path / "c"), m, table_names={"x": ["table"]})
    with pytest.raises(dynemb.InvalidArgument, match="no dynemb tables"):
        dynemb.DynamicEmbDump(str(tmp_path / "c"), torch.nn.Linear(2, 2))


def test_load_into_a_table_of_another_dim_raises_and_changes_nothing(seed, tmp_path):
    m = trained_bag()
    dynemb.DynamicEmbDump(str(tmp_path / "c"), m)
    other = DynamicEmbeddingBag(100, 6)
    other(torch.randint(0, 100, (3, 3))).sum().backward()
    before = all_rows(other)
    with pytest.raises(dynemb.CheckpointError):
        dynemb.DynamicEmbLoad(str(tmp_path / "c"), other)
    after = all_rows(other)
    assert before.keys() == after.keys()


def test_compiled_module_errors_are_exceptions_not_crashes():
    h = DynamicEmbeddingBag(100, 4).dynemb_tables()["table"]
    with pytest.raises(dynemb.InvalidArgument, match="indices"):
        h.forward(object(), None, None, dynemb._C.PoolingMode.NONE, True, None, 0)
    with pytest.raises(dynemb.StateError, match="training forward"):
        h.backward(torch.zeros(1, 4), 7, 0)
    with pytest.raises(dynemb.InvalidArgument, match="out"):
        h.forward(torch.tensor([1, 2]), torch.tensor([0, 2]), None, dynemb._C.PoolingMode.NONE,
                  True, torch.zeros(3, 4), 0)
    with pytest.raises(dynemb.InvalidArgument, match="out"):
        h.forward(torch.tensor([1, 2]), torch.tensor([0, 2]), None, dynemb._C.PoolingMode.NONE,
                  True, torch.zeros(2, 5), 0)
    with pytest.raises(dynemb.InvalidArgument, match="offsets"):
        h.forward(torch.tensor([1, 2]), None, None, dynemb._C.PoolingMode.SUM, True, None, 0)
