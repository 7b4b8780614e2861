"""set_host_sync_free: grouped tables whose training steps read nothing on the host. Against the
same module with its synchronizing steps (the reference): the same outputs, rows and counts bit
for bit over several training steps; a batch with a key wider than the declared key bits is
refused on the device (counted, no row changed, outputs from the eval initializer) instead of
raising; bad arguments name themselves and change nothing."""

import pytest
import torch

import dynemb
from conftest import DEVICES, all_rows, same_row_dicts, same_rows, train_alike, zipf_ids
from dynemb.torch import (
    DynamicEmbeddingBagCollection,
    EmbeddingBagConfig,
    KeyedJaggedTensor,
)

ADAM = {"optimizer": "adam", "learning_rate": 0.05, "eps": 1e-6}
UNIVERSE = 1000
KEY_BITS = 10  # every key below UNIVERSE < 2^10


def configs():
    return [
        EmbeddingBagConfig(name="a", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fa"]),
        EmbeddingBagConfig(name="b", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fb", "fb2"]),
        EmbeddingBagConfig(name="c", embedding_dim=8, num_embeddings=UNIVERSE,
                           feature_names=["fc"]),
    ]


def module(device):
    return DynamicEmbeddingBagCollection(configs(), fused_params=ADAM, device=device,
                                         group_tables=True)


def batch(keys, bags, gen, device):
    lengths = torch.randint(0, 6, (len(keys) * bags,), generator=gen)
    values = zipf_ids(int(lengths.sum()), UNIVERSE, gen)
    return KeyedJaggedTensor(keys, values.to(device), lengths=lengths.to(device))


@pytest.mark.parametrize("device", DEVICES)
def test_sync_free_steps_match_synchronizing_steps(seed, device):
    free, synced = module(device), module(device)
    free.set_host_sync_free(True, key_bits=KEY_BITS)
    assert all(g.handle.host_sync_free for g in free._groups)
    assert not any(g.handle.host_sync_free for g in synced._groups)
    gen = torch.Generator().manual_seed(seed)
    keys = ["fb2", "fa", "fc", "fb"]
    train_alike(free, synced, (batch(keys, 7, gen, device) for _ in range(6)), gen, device)
    same_rows(free, synced, "abc")
    for t in "abc":
        f, s = free.table_stats()[t], synced.table_stats()[t]
        for field in ("size", "lookups", "unique_lookups", "rows_created"):
            assert f[field] == s[field], (t, field, f, s)
        assert f["refused_batches"] == 0 and s["refused_batches"] == 0
    # Evaluation keeps its host reads and reads the same rows.
    free.eval()
    synced.eval()
    kjt = batch(keys, 5, gen, device)
    with torch.no_grad():
        torch.testing.assert_close(free(kjt).values(), synced(kjt).values(), rtol=0, atol=0)


@pytest.mark.parametrize("device", DEVICES)
def test_a_key_wider_than_key_bits_is_refused_and_counted(seed, device):
    m = module(device)
    m.set_host_sync_free(True, key_bits=KEY_BITS)
    gen = torch.Generator().manual_seed(seed)
    keys = ["fa", "fb", "fb2", "fc"]
    for _ in range(2):
        out = m(batch(keys, 4, gen, device)).values()
        (out * torch.randn(out.shape, generator=gen).to(device)).sum().backward()
    before = {t: all_rows(m, t) for t in "abc"}
    stats_before = m.table_stats()
    # One id of table b's feature at 2^KEY_BITS + a random offset: too wide for the step.
    lengths = torch.full((len(keys) * 4,), 2, dtype=torch.int64)
    values = zipf_ids(int(lengths.sum()), UNIVERSE, gen)
    wide = (1 << KEY_BITS) + int(torch.randint(0, 1000, (1,), generator=gen))
    values[2 * 4 + 1] = wide  # the second id of fb's first bag
    kjt = KeyedJaggedTensor(keys, values.to(device), lengths=lengths.to(device))
    out = m(kjt).values()
    # No exception: refused on the device, every output the eval initializer's (zeros).
    assert float(out.abs().sum()) == 0.0
    out.sum().backward()
    stats = m.table_stats()
    for t in "abc":
        assert stats[t]["refused_batches"] == stats_before[t]["refused_batches"] + 1, stats[t]
        assert stats[t]["size"] == stats_before[t]["size"], (t, stats[t], stats_before[t])
        same_row_dicts(all_rows(m, t), before[t], t)
    assert wide not in all_rows(m, "b")
    # The next batch within the key bits trains again.
    kjt = batch(keys, 4, gen, device)
    out = m(kjt).values()
    assert float(out.abs().sum()) > 0.0
    out.sum().backward()
    assert m.table_stats()["a"]["refused_batches"] == stats["a"]["refused_batches"]


def test_set_host_sync_free_bad_arguments_change_nothing(seed):
    ungrouped = DynamicEmbeddingBagCollection(configs(), fused_params=ADAM)
    with pytest.raises(dynemb.InvalidArgument, match="group_tables=True"):
        ungrouped.set_host_sync_free(True)
    m = module("cpu")
    for bad in (-1, 2.5, True, "8"):
        with pytest.raises(dynemb.InvalidArgument, match="key_bits"):
            m.set_host_sync_free(True, key_bits=bad)
    # Three tables take 2 bits of the 64: key_bits 63 is over the 62 left.
    with pytest.raises(dynemb.InvalidArgument, match="key_bits = 63"):
        m.set_host_sync_free(True, key_bits=63)
    assert not any(g.handle.host_sync_free for g in m._groups)
    m.set_host_sync_free(True, key_bits=62)
    assert all(g.handle.host_sync_free for g in m._groups)
    m.set_host_sync_free(False)
    assert not any(g.handle.host_sync_free for g in m._groups)
