"""Forward and gradients of the dynemb modules against nn.EmbeddingBag / nn.Embedding holding
the same rows."""

import pytest
import torch
from torch import nn

import dynemb
from dynemb.torch import (
    DynamicEmbedding,
    DynamicEmbeddingBag,
    DynamicEmbeddingBagCollection,
    DynamicEmbeddingCollection,
    EmbeddingBagConfig,
    EmbeddingConfig,
    KeyedJaggedTensor,
)

from conftest import DEVICES, rows_of, zipf_ids

SGD1 = {"optimizer": dynemb.EmbOptimType.SGD, "learning_rate": 1.0}


def twin_bag(module_rows: torch.Tensor, ids: torch.Tensor, universe: int, mode: str):
    """An nn.EmbeddingBag over [0, universe) whose rows `ids` are module_rows."""
    ref = nn.EmbeddingBag(universe, module_rows.shape[1], mode=mode).to(torch.float64)
    with torch.no_grad():
        ref.weight.zero_()
        ref.weight[ids] = module_rows.to(torch.float64).cpu()
    return ref


def random_bags(batch: int, max_len: int, universe: int, device):
    lengths = torch.randint(0, max_len + 1, (batch,))
    ids = zipf_ids(int(lengths.sum()), universe)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), lengths.cumsum(0)])
    return ids.to(device), offsets.to(device), lengths


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mode", ["sum", "mean"])
@pytest.mark.parametrize("weighted", [False, True])
def test_bag_forward_and_gradient(seed, device, mode, weighted):
    if weighted and mode == "mean":
        pytest.skip("weights are for SUM only (as nn.EmbeddingBag)")
    universe, dim, batch = 500, 12, 64
    m = DynamicEmbeddingBag(universe, dim, mode=mode, fused_params=SGD1, device=device)
    ids, offsets, _ = random_bags(batch, 9, universe, device)
    weights = torch.rand(ids.numel(), device=device) if weighted else None
    out = m(ids, offsets[:-1], per_sample_weights=weights)
    assert out.shape == (batch, dim) and out.device.type == device
    unique = torch.unique(ids)
    before = rows_of(m, unique).cpu()
    ref = twin_bag(before, unique.cpu(), universe, mode)
    ref_out = ref(ids.cpu(), offsets[:-1].cpu(),
                  per_sample_weights=None if weights is None else weights.cpu().double())
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=1e-5, atol=1e-6)
    # SGD with lr 1: the rows move by exactly minus their gradient.
    upstream = torch.randn(batch, dim, dtype=torch.float64)
    (out * upstream.to(device, torch.float32)).sum().backward()
    (ref_out * upstream).sum().backward()
    after = rows_of(m, unique).cpu()
    torch.testing.assert_close((before - after).double(), ref.weight.grad[unique.cpu()],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_bag_2d_input_matches_1d(seed, device):
    m = DynamicEmbeddingBag(100, 8, device=device)
    m.eval()
    ids = torch.randint(0, 100, (16, 5), device=device)
    a = m(ids)
    b = m(ids.reshape(-1), torch.arange(0, 80, 5, device=device))
    torch.testing.assert_close(a, b)
    m.include_last_offset = True
    c = m(ids.reshape(-1), torch.arange(0, 81, 5, device=device))
    torch.testing.assert_close(a, c)


@pytest.mark.parametrize("device", DEVICES)
def test_sequence_forward_and_gradient(seed, device):
    universe, dim = 300, 6
    m = DynamicEmbedding(universe, dim, fused_params=SGD1, device=device)
    ids = zipf_ids(4 * 25, universe).view(4, 25).to(device)
    out = m(ids)
    assert out.shape == (4, 25, dim)
    unique = torch.unique(ids)
    before = rows_of(m, unique).cpu()
    ref = nn.Embedding(universe, dim).double()
    with torch.no_grad():
        ref.weight.zero_()
        ref.weight[unique.cpu()] = before.double()
    ref_out = ref(ids.cpu())
    torch.testing.assert_close(out.cpu().double(), ref_out, rtol=1e-6, atol=1e-7)
    upstream = torch.randn(4, 25, dim, dtype=torch.float64)
    (out * upstream.to(device, torch.float32)).sum().backward()
    (ref_out * upstream).sum().backward()
    after = rows_of(m, unique).cpu()
    torch.testing.assert_close((before - after).double(), ref.weight.grad[unique.cpu()],
                               rtol=1e-4, atol=1e-5)


def make_kjt(keys, batch, max_len, universes, device, weighted=False):
    lengths, values = [], []
    for k in keys:
        ln = torch.randint(0, max_len + 1, (batch,))
        lengths.append(ln)
        values.append(zipf_ids(int(ln.sum()), universes[k]))
    lengths = torch.cat(lengths)
    values = torch.cat(values)
    weights = torch.rand(values.numel()) if weighted else None
    return KeyedJaggedTensor(keys, values.to(device),
                             weights=None if weights is None else weights.to(device),
                             lengths=lengths.to(device))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("weighted", [False, True])
def test_bag_collection_mixed_dims_shared_table(seed, device, weighted):
    configs = [
        EmbeddingBagConfig(name="t_user", embedding_dim=8, num_embeddings=400,
                           feature_names=["user", "friend"]),
        EmbeddingBagConfig(name="t_item", embedding_dim=16, num_embeddings=300,
                           feature_names=["item"]),
    ]
    ebc = DynamicEmbeddingBagCollection(configs, fused_params=SGD1, device=device,
                                        is_weighted=weighted)
    universes = {"user": 400, "friend": 400, "item": 300}
    # Keys in an order other than the tables' features: the collection regroups them.
    kjt = make_kjt(["item", "friend", "user"], 32, 6, universes, device, weighted)
    kt = ebc(kjt)
    assert kt.keys() == ["user", "friend", "item"]
    assert kt.values().shape == (32, 8 + 8 + 16)
    jt = kjt.to_dict()
    loss = 0.0
    refs = {}
    for table, feats in (("t_user", ["user", "friend"]), ("t_item", ["item"])):
        ids = torch.cat([jt[f].values() for f in feats])
        unique = torch.unique(ids)
        before = rows_of(ebc, unique, table).cpu()
        refs[table] = (twin_bag(before, unique.cpu(), 400, "sum"), unique, before)
    ups = {}
    for table, feats in (("t_user", ["user", "friend"]), ("t_item", ["item"])):
        ref = refs[table][0]
        for f in feats:
            j = jt[f]
            w = None if not weighted else j.weights_or_none().cpu().double()
            r = ref(j.values().cpu(), j.offsets()[:-1].cpu(), per_sample_weights=w)
            torch.testing.assert_close(kt[f].cpu().double(), r, rtol=1e-5, atol=1e-6)
            ups[f] = torch.randn_like(r)
            loss = loss + (r * ups[f]).sum()
    loss.backward()
    total = sum((kt[f] * ups[f].to(device, torch.float32)).sum() for f in ups)
    total.backward()
    for table, (ref, unique, before) in refs.items():
        after = rows_of(ebc, unique, table).cpu()
        torch.testing.assert_close((before - after).double(), ref.weight.grad[unique.cpu()],
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_sequence_collection(seed, device):
    configs = [EmbeddingConfig(name="a", embedding_dim=4, num_embeddings=100),
               EmbeddingConfig(name="b", embedding_dim=10, num_embeddings=100)]
    ec = DynamicEmbeddingCollection(configs, device=device)
    kjt = make_kjt(["a", "b"], 8, 5, {"a": 100, "b": 100}, device)
    out = ec(kjt)
    for f, dim in (("a", 4), ("b", 10)):
        j = kjt.to_dict()[f]
        assert out[f].values().shape == (j.values().numel(), dim)
        torch.testing.assert_close(out[f].lengths(), j.lengths())
        expected = rows_of(ec, j.values(), f)
        torch.testing.assert_close(out[f].values(), expected)


def test_eval_reads_eval_initializer_and_never_inserts(seed):
    opts = dynemb.DynamicEmbTableOptions(
        eval_initializer_args=dynemb.DynamicEmbInitializerArgs(
            mode=dynemb.DynamicEmbInitializerMode.CONSTANT, value=0.25))
    m = DynamicEmbeddingBag(1000, 4, table_options=opts)
    m.eval()
    out = m(torch.tensor([[1, 2], [3, 4]]))
    torch.testing.assert_close(out, torch.full((2, 4), 0.5))
    assert m.table_stats()["table"]["size"] == 0
    assert m.table_stats()["table"]["eval_misses"] == 4
    m.train()
    m(torch.tensor([[1, 2], [3, 4]]))
    assert m.table_stats()["table"]["size"] == 4


def test_initializer_defaults_follow_dynamicemb(seed):
    # UNIFORM within +-1/sqrt(num_embeddings) by default.
    m = DynamicEmbedding(10000, 64)
    ids = torch.arange(500)
    m(ids)
    rows = rows_of(m, ids)
    bound = 1.0 / 100.0
    assert float(rows.abs().max()) <= bound
    assert float(rows.std()) > bound / 3  # spread over the range, not constant
    o = dynemb.DynamicEmbTableOptions()
    assert o.score_strategy == dynemb.DynamicEmbScoreStrategy.TIMESTAMP
    assert o.safe_check_mode == dynemb.DynamicEmbCheckMode.IGNORE
    assert o.bucket_capacity == 128 and o.max_load_factor == 0.5 and o.training
    assert o.eval_initializer_args.mode == dynemb.DynamicEmbInitializerMode.CONSTANT


def test_stats_count_evictions_and_refusals(seed):
    # One bucket of 16 slots, 64 distinct keys: 48 keys evict or are refused, and every one is
    # counted.
    opts = dynemb.DynamicEmbTableOptions(max_capacity=16, bucket_capacity=16,
                                         score_strategy=dynemb.DynamicEmbScoreStrategy.STEP)
    m = DynamicEmbeddingBag(16, 4, table_options=opts)
    for step in range(4):
        ids = torch.arange(step * 16, step * 16 + 16)
        out = m(ids.view(4, 4))
        out.sum().backward()
    s = m.table_stats()["table"]
    assert s["size"] == 16 and s["capacity"] == 16
    assert s["evictions"] + s["refused"] == 48
    assert s["rows_created"] == 64


def test_admission_keeps_keys_out_until_seen_enough(seed):
    opts = dynemb.DynamicEmbTableOptions(
        admit_strategy=dynemb.FrequencyAdmissionStrategy(threshold=3, counter_capacity=1024))
    m = DynamicEmbeddingBag(1000, 4, table_options=opts)
    ids = torch.tensor([[5, 6]])
    for seen in range(1, 4):
        out = m(ids)
        out.sum().backward()
        s = m.table_stats()["table"]
        if seen < 3:
            assert s["size"] == 0 and float(out.abs().sum()) == 0.0  # eval initializer: zeros
        else:
            assert s["size"] == 2
    assert m.table_stats()["table"]["admission_pending"] == 4


def test_expiry_erases_rows_not_touched_for_ttl_steps(seed):
    opts = dynemb.DynamicEmbTableOptions(score_strategy=dynemb.DynamicEmbScoreStrategy.STEP,
                                         ttl_steps=2)
    m = DynamicEmbeddingBag(1000, 4, table_options=opts)
    m(torch.tensor([[1, 2]])).sum().backward()
    for _ in range(4):
        m(torch.tensor([[3]])).sum().backward()
    s = m.table_stats()["table"]
    assert s["expired"] == 2 and s["size"] == 1


def test_safe_check_error_raises_insert_refused(seed):
    opts = dynemb.DynamicEmbTableOptions(
        max_capacity=16, bucket_capacity=16, safe_check_mode=dynemb.DynamicEmbCheckMode.ERROR,
        score_strategy=dynemb.DynamicEmbScoreStrategy.CUSTOMIZED)
    m = DynamicEmbeddingBag(16, 4, table_options=opts)
    dynemb.set_score(m, 100)
    m(torch.arange(16).view(4, 4)).sum().backward()
    dynemb.set_score(m, 50)  # lower than every stored key: a new key is refused
    with pytest.raises(dynemb.InsertRefused):
        m(torch.tensor([[1000]]))
    s = m.table_stats()["table"]
    assert s["refused"] == 1 and s["size"] == 16


@pytest.mark.parametrize("device", DEVICES)
def test_empty_bags_and_empty_batches(seed, device):
    ebc = DynamicEmbeddingBagCollection(
        [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=100, feature_names=["f"])],
        device=device)
    kjt = KeyedJaggedTensor(["f"], torch.zeros(0, dtype=torch.int64, device=device),
                            lengths=torch.zeros(3, dtype=torch.int64, device=device))
    out = ebc(kjt)["f"]
    assert out.shape == (3, 4) and float(out.abs().sum()) == 0.0
    out.sum().backward()
    m = DynamicEmbeddingBag(100, 4, device=device)
    out = m(torch.tensor([1, 2], device=device), torch.tensor([0, 0, 2], device=device))
    assert float(out[0].abs().sum()) == 0.0 and float(out[1].abs().sum()) > 0.0
    out.sum().backward()


class DuckBatch:
    """A keyed jagged batch that is not dynemb's class (as TorchRec's is not): keys, values,
    lengths and weights_or_none only."""

    def __init__(self, keys, values, lengths, weights=None):
        self._k, self._v, self._l, self._w = keys, values, lengths, weights

    def keys(self):
        return self._k

    def values(self):
        return self._v

    def lengths(self):
        return self._l

    def weights_or_none(self):
        return self._w


def test_any_keyed_jagged_batch_is_accepted(seed):
    configs = [EmbeddingBagConfig(name="t", embedding_dim=4, num_embeddings=100,
                                  feature_names=["a", "b"])]
    ebc = DynamicEmbeddingBagCollection(configs, is_weighted=True)
    lengths = torch.tensor([1, 2, 0, 3])
    values = torch.randint(0, 100, (6,), dtype=torch.int32)  # int32 ids are widened
    weights = torch.rand(6)
    a = ebc(DuckBatch(["a", "b"], values, lengths, weights))
    b = ebc(KeyedJaggedTensor(["a", "b"], values.long(), weights=weights, lengths=lengths))
    torch.testing.assert_close(a.values(), b.values())
    # Grouped (packed batches): the key starts read from the duck's offsets, as none are given.
    grouped = DynamicEmbeddingBagCollection(configs, is_weighted=True, group_tables=True)
    c = grouped(DuckBatch(["a", "b"], values, lengths, weights))
    torch.testing.assert_close(c.values(), b.values())


def test_calls_from_several_threads_take_turns(seed):
    import threading

    m = DynamicEmbeddingBag(1000, 8)
    ids = zipf_ids(64 * 4, 1000).view(64, 4)
    m(ids)  # rows for every id
    m.eval()
    expected = m(ids)
    errors = []

    def work():
        try:
            for _ in range(20):
                torch.testing.assert_close(m(ids), expected)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
