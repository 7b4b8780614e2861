"""Caching tables from Python: a small cache over host memory, RocksDB or Redis trains exactly
as an uncached table (outputs every step, every row with its optimizer state at the end, in
both tiers), its counters show the traffic, and checkpoints cover both tiers. The caches hold
each batch's distinct keys (docs/python.md, "Caching"); the tables hold several times more."""

import os
import shutil
import socket
import subprocess
import time

import pytest
import torch

import dynemb
from conftest import DEVICES, all_rows, zipf_ids
from dynemb.options import to_embedding_options
from dynemb.torch import (
    DynamicEmbeddingBag,
    DynamicEmbeddingBagCollection,
    EmbeddingBagConfig,
    KeyedJaggedTensor,
)

ADAM = {"optimizer": "adam", "learning_rate": 0.05, "eps": 1e-6}
DIM, UNIVERSE = 8, 2000


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    """A redis-server on a free loopback port, stopped afterwards (skip where none is installed)."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    proc = subprocess.Popen([exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                             "--appendonly", "no", "--dir", str(tmp_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                time.sleep(0.05)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def built(make):
    """make(), or a skip when this module was built without that store (NotAvailable)."""
    try:
        return make()
    except dynemb.NotAvailable as e:
        pytest.skip(str(e))


def make_store(kind, row_dim, tmp_path, redis):
    if kind == "host":
        return None  # the default lower tier: host memory of max_capacity rows
    if kind == "rocksdb":
        return built(lambda: dynemb.RocksDbStorage(row_dim, str(tmp_path / "rocks")))
    return built(lambda: dynemb.RedisStorage(row_dim, [redis], prefix=f"t{os.getpid()}"))


def draw_ids(n, gen):
    """Half skewed (keys that come back after being evicted), half uniform (new keys)."""
    return torch.cat([zipf_ids(n - n // 2, UNIVERSE, gen),
                      torch.randint(0, UNIVERSE, (n // 2,), generator=gen)])


def train_pair(seed, device, cached, plain, steps=16, bags=4, length=4):
    """Trains both modules on the same batches; asserts equal outputs every step."""
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        ids = draw_ids(bags * length, gen)
        offsets = torch.arange(0, bags * length, length, dtype=torch.int64)
        out_c = cached(ids.to(device), offsets.to(device))
        out_p = plain(ids.to(device), offsets.to(device))
        torch.testing.assert_close(out_c, out_p, rtol=0, atol=0,
                                   msg=lambda m: f"step {step} output: {m}")
        ups = torch.randn(out_p.shape, generator=gen).to(device)
        (out_c * ups).sum().backward()
        (out_p * ups).sum().backward()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["host", "rocksdb", "redis"])
def test_caching_table_trains_as_uncached(seed, device, kind, tmp_path, request):
    redis = request.getfixturevalue("redis_server") if kind == "redis" else None
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device)
    row_dim = plain.dynemb_tables()["table"].row_dim
    assert row_dim_of(DIM, ADAM) == row_dim
    # A cache of 128 rows (8 buckets of 16) for ~200 keys, 16 ids a batch (a bucket overflowing
    # with one batch's keys is then out of reach): rows go down and come back.
    opts = dynemb.DynamicEmbTableOptions(caching=True, bucket_capacity=16,
                                         global_hbm_for_values=128 * row_dim * 4,
                                         external_storage=make_store(kind, row_dim, tmp_path, redis))
    cached = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device,
                                 table_options=opts)
    # 40 steps: enough that some row sent down comes back up (16 missed that for about one
    # seed in ten).
    train_pair(seed, device, cached, plain, steps=40)
    want, got = all_rows(plain), all_rows(cached)
    assert sorted(got) == sorted(want)
    for k in want:
        assert torch.equal(got[k], want[k]), f"key {k}: {got[k]} != {want[k]}"
    s = cached.caching_stats()["table"]
    assert s["fast_capacity"] == 128 and s["fast_size"] <= 128
    assert s["misses"] > 0 and s["lower_hits"] > 0 and s["rows_down"] > 0, s
    assert s["batch_evicted"] == 0, s
    assert s["lower_evicted"] == 0 and s["pending_rows"] == 0 and s["lower_failures"] == 0, s
    assert cached.table_stats()["table"]["size"] == len(want)
    assert plain.caching_stats() == {"table": None}
    if kind != "host":
        # After flush_storage the store holds every row (the cached ones copied down too).
        cached.flush_storage()
        store = opts.external_storage
        assert store.size() == len(want), (store.size(), len(want))


def row_dim_of(dim, fused):
    """The row width dynemb.embedding_row_dim gives a table of `dim` under `fused`."""
    e = to_embedding_options(dynemb.DynamicEmbTableOptions(), dim, UNIVERSE, fused, 0, "test")
    return dynemb.embedding_row_dim(e)


def test_bounded_host_tier_counts_what_it_drops(seed):
    """A default host tier of max_capacity rows under a cache: keys beyond it are dropped by the
    host tier's policy and counted, never silently."""
    sgd = {"optimizer": "sgd", "learning_rate": 0.1}
    row_dim = row_dim_of(4, sgd)
    opts = dynemb.DynamicEmbTableOptions(caching=True, bucket_capacity=16, max_capacity=128,
                                         global_hbm_for_values=128 * row_dim * 4)
    m = DynamicEmbeddingBag(UNIVERSE, 4, fused_params=sgd, table_options=opts)
    ids = torch.randperm(UNIVERSE)[:400]
    for part in ids.split(25):  # 16 batches of 25 distinct keys, none seen before
        m(part, torch.arange(0, 25, 5)).sum().backward()
    s = m.caching_stats()["table"]
    stored = m.table_stats()["table"]["size"]
    assert s["batch_evicted"] == 0 and s["lower_evicted"] > 0, s
    assert stored + s["lower_evicted"] == 400, (stored, s)


def test_collection_with_external_storage_factory_and_checkpoint(seed, tmp_path):
    """external_storage as a callable (table name, row_dim): one RocksDB directory per table;
    a checkpoint of the caching collection loads into an uncached one with every row."""
    made = {}

    def rocks(name, row_dim):
        made[name] = dynemb.RocksDbStorage(row_dim, str(tmp_path / name))
        return made[name]

    built(lambda: dynemb.RocksDbStorage(4, str(tmp_path / "probe")))  # skip without RocksDB

    configs = [EmbeddingBagConfig(name="a", embedding_dim=8, num_embeddings=UNIVERSE,
                                  feature_names=["fa"]),
               EmbeddingBagConfig(name="b", embedding_dim=4, num_embeddings=UNIVERSE,
                                  feature_names=["fb"], pooling="MEAN")]
    # Without caching the table's capacity (128 rows, 8 buckets) is the fast tier.
    opts = dynemb.DynamicEmbTableOptions(external_storage=rocks, max_capacity=128,
                                         bucket_capacity=16)
    cached = DynamicEmbeddingBagCollection(configs, fused_params=ADAM, table_options=opts)
    plain = DynamicEmbeddingBagCollection(configs, fused_params=ADAM)
    assert sorted(made) == ["a", "b"]
    gen = torch.Generator().manual_seed(seed)
    for step in range(8):
        lengths = torch.randint(0, 6, (2 * 12,), generator=gen)
        values = draw_ids(int(lengths.sum()), gen)
        kjt = KeyedJaggedTensor(["fa", "fb"], values, lengths=lengths)
        kc, kp = cached(kjt), plain(kjt)
        torch.testing.assert_close(kc.values(), kp.values(), rtol=0, atol=0)
        ups = torch.randn(kp.values().shape, generator=gen)
        (kc.values() * ups).sum().backward()
        (kp.values() * ups).sum().backward()
    for t in ("a", "b"):
        want, got = all_rows(plain, t), all_rows(cached, t)
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)
        s = cached.caching_stats()[t]
        assert s["rows_down"] > 0 and s["batch_evicted"] == 0, s
    dynemb.DynamicEmbDump(str(tmp_path / "ckpt"), cached, optim=True)
    restored = DynamicEmbeddingBagCollection(configs, fused_params=ADAM)
    dynemb.DynamicEmbLoad(str(tmp_path / "ckpt"), restored, optim=True)
    for t in ("a", "b"):
        want, got = all_rows(plain, t), all_rows(restored, t)
        assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


class DictStore(dynemb.Storage):
    """A lower tier written in Python (a dict), with failures on request."""

    def __init__(self, row_dim):
        super().__init__(row_dim)
        self.rows, self.fail = {}, False

    def _check(self):
        if self.fail:
            raise IOError("the dict store is down")

    def find(self, keys, values, scores, founds):
        self._check()
        for i, k in enumerate(keys.tolist()):
            row = self.rows.get(k)
            founds[i] = row is not None
            if row is not None:
                values[i], scores[i] = row

    def write(self, put_keys, put_values, put_scores, erase_keys):
        self._check()
        for k in erase_keys.tolist():
            self.rows.pop(k, None)
        for i, k in enumerate(put_keys.tolist()):
            self.rows[k] = (put_values[i].copy(), int(put_scores[i]))

    def scan(self, position, max_rows, keys, values, scores):
        items = sorted(self.rows.items())
        start = int(position.decode() or "0")
        chunk = items[start:start + max_rows]
        for i, (k, (v, s)) in enumerate(chunk):
            keys[i], values[i], scores[i] = k, v, s
        end = start + len(chunk)
        return len(chunk), str(end).encode(), end >= len(items)

    def size(self):
        return len(self.rows)

    def clear(self):
        self.rows.clear()


def test_python_storage_subclass_trains_as_uncached_and_survives_failures(seed, tmp_path):
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM)
    row_dim = plain.dynemb_tables()["table"].row_dim
    store = DictStore(row_dim)
    opts = dynemb.DynamicEmbTableOptions(caching=True, bucket_capacity=16,
                                         global_hbm_for_values=128 * row_dim * 4,
                                         external_storage=store)
    cached = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, table_options=opts)
    train_pair(seed, "cpu", cached, plain)
    assert len(store.rows) > 0 and store.describe() == "python:DictStore"
    s = store.stats()
    assert s["reads"] > 0 and s["rows_written"] > 0 and s["failures"] == 0, s
    # The store goes down: a step that needs it raises StorageError naming the Python error.
    store.fail = True
    gen = torch.Generator().manual_seed(seed + 1)
    with pytest.raises(dynemb.StorageError, match="the dict store is down"):
        for _ in range(20):  # until a step misses the cache
            ids = draw_ids(64, gen)
            cached(ids, torch.arange(0, 64, 4)).sum().backward()
    assert store.stats()["failures"] >= 1
    store.fail = False
    # Back up: nothing was lost; the checkpoint of both tiers holds every row the plain
    # module holds for the keys the plain module saw.
    dynemb.DynamicEmbDump(str(tmp_path / "c"), cached, optim=True)
    assert cached.caching_stats()["table"]["pending_rows"] == 0
    got = all_rows(cached)
    want = all_rows(plain)
    assert set(want) <= set(got)


def test_one_store_object_serves_one_table(seed):
    """A store object given in options shared by a collection's tables would mix their keys:
    the second table that takes it is refused; one table takes it without copying it."""
    row_dim = row_dim_of(8, ADAM)
    store = dynemb.HostStorage(row_dim)
    opts = dynemb.DynamicEmbTableOptions(external_storage=store, max_capacity=128,
                                         bucket_capacity=16)
    one = [EmbeddingBagConfig(name="a", embedding_dim=8, num_embeddings=UNIVERSE,
                              feature_names=["fa"])]
    m = DynamicEmbeddingBagCollection(one, fused_params=ADAM, table_options=opts)
    assert m.caching_stats()["a"]["lower_tier"] == store.describe()
    two = one + [EmbeddingBagConfig(name="b", embedding_dim=8, num_embeddings=UNIVERSE,
                                    feature_names=["fb"])]
    with pytest.raises(dynemb.InvalidArgument, match="already the lower tier of table 'a'"):
        DynamicEmbeddingBagCollection(two, fused_params=ADAM,
                                      table_options=dynemb.DynamicEmbTableOptions(
                                          external_storage=dynemb.HostStorage(row_dim),
                                          max_capacity=128, bucket_capacity=16))
