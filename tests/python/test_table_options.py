"""DynamicEmbTableOptions fields that pass C++ TableOptions / CachingOptions through
(private_store, max_call_keys, prefault_host_memory, join_contended_copies,
grouped_write_min_batch, host_keys_in_flight) and the caching counters beyond the first ones
(filtered, phases, fast, lower, buffer_growths): each option reaches the compiled options, a table built with it holds the same rows as
one built without it, and private_store's filter spares the lower-tier reads it says it spares."""

import pytest
import torch

import dynemb
from conftest import DEVICES, all_rows, zipf_ids
from dynemb.options import caching_options, to_embedding_options
from dynemb.torch import DynamicEmbedding, DynamicEmbeddingBag
from test_storage import ADAM, DIM, UNIVERSE, DictStore, draw_ids, row_dim_of

PHASES = ("lookup_ns", "misses_ns", "lower_read_ns", "insert_ns", "evicted_ns", "write_down_ns",
          "outputs_ns")


def train_together(seed, device, modules, steps=24, bags=4, length=4):
    """Trains every module on the same batches; asserts each output equals the first's."""
    gen = torch.Generator().manual_seed(seed)
    for step in range(steps):
        ids = draw_ids(bags * length, gen).to(device)
        offsets = torch.arange(0, bags * length, length, dtype=torch.int64, device=device)
        ups = torch.randn((bags, DIM), generator=gen).to(device)
        outs = [m(ids, offsets) for m in modules]
        for i, out in enumerate(outs[1:], 1):
            torch.testing.assert_close(out, outs[0], rtol=0, atol=0,
                                       msg=lambda m: f"step {step}, module {i}: {m}")
        for out in outs:
            (out * ups).sum().backward()


def assert_same_rows(a, b):
    want, got = all_rows(a), all_rows(b)
    assert sorted(got) == sorted(want)
    for k in want:
        assert torch.equal(got[k], want[k]), f"key {k}: {got[k]} != {want[k]}"


def caching_opts(row_dim, store, private, cache_rows=128):
    # A cache of 128 rows (8 buckets of 16) for ~2000 keys: rows go down and come back.
    return dynemb.DynamicEmbTableOptions(caching=True, bucket_capacity=16,
                                         global_hbm_for_values=cache_rows * row_dim * 4,
                                         external_storage=store, private_store=private,
                                         private_store_filter_log2_bits=16)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", ["host", "python"])
def test_private_store_trains_as_shared_and_skips_reads_of_new_keys(seed, device, kind):
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device)
    row_dim = plain.dynemb_tables()["table"].row_dim
    make = (lambda: dynemb.HostStorage(row_dim)) if kind == "host" else (lambda: DictStore(row_dim))
    stores = {"shared": make(), "private": make()}
    cached = {name: DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device,
                                        table_options=caching_opts(row_dim, store,
                                                                   name == "private"))
              for name, store in stores.items()}
    train_together(seed, device, [plain, cached["shared"], cached["private"]])
    assert_same_rows(plain, cached["shared"])
    assert_same_rows(plain, cached["private"])
    shared = cached["shared"].caching_stats()["table"]
    private = cached["private"].caching_stats()["table"]
    # Both tables see the same misses and find the same rows below: the filter only drops
    # reads of keys never written down (no false negatives).
    for key in ("lookups", "misses", "lower_hits", "new_rows", "rows_down"):
        assert private[key] == shared[key], (key, private, shared)
    assert shared["filtered"] == 0 and private["filtered"] > 0, (shared, private)
    assert private["lower_hits"] > 0 and private["filtered"] <= private["new_rows"], private
    # Each key the filter spared is one row fewer asked of the store.
    reads = {name: s.stats()["rows_read"] for name, s in stores.items()}
    assert reads["private"] + private["filtered"] == reads["shared"], (reads, private)
    for s, store in ((shared, stores["shared"]), (private, stores["private"])):
        assert s["lower"] == store.stats(), (s["lower"], store.stats())
        assert s["lower_evicted"] == s["lower"]["evicted"] == 0


@pytest.mark.parametrize("device", DEVICES)
def test_private_store_reads_rows_a_store_held_before_the_table(seed, device):
    """A store that is not empty at construction is scanned into the filter: its rows are
    read, and only keys stored nowhere skip the read."""
    gen = torch.Generator().manual_seed(seed)
    row_dim = row_dim_of(DIM, ADAM)
    store = DictStore(row_dim)
    below = torch.randperm(UNIVERSE, generator=gen)[:300]
    rows = torch.randn((300, row_dim), generator=gen)
    for k, row in zip(below.tolist(), rows):
        store.rows[k] = (row.numpy().copy(), 1)
    # 64 buckets for the call's 80 keys: none is pushed out by the call's own keys.
    opts = caching_opts(row_dim, store, True, cache_rows=1024)
    m = DynamicEmbedding(UNIVERSE, DIM, fused_params=ADAM, device=device, table_options=opts)
    fresh = DynamicEmbedding(UNIVERSE, DIM, fused_params=ADAM, device=device)  # initializer rows
    stored = below[torch.randperm(300, generator=gen)[:40]]
    new = torch.tensor(sorted(set(range(UNIVERSE)) - set(below.tolist())))[
        torch.randperm(UNIVERSE - 300, generator=gen)[:40]]
    ids = torch.cat([stored, new])[torch.randperm(80, generator=gen)]
    out = m(ids.to(device)).cpu()
    want = fresh(ids.to(device)).cpu()
    row_of = {k: rows[i, :DIM] for i, k in enumerate(below.tolist())}
    for i, k in enumerate(ids.tolist()):
        expected = row_of[k] if k in row_of else want[i]
        assert torch.equal(out[i], expected), f"id {k} (stored below: {k in row_of})"
    s = m.caching_stats()["table"]
    read = store.stats()
    assert s["lower_hits"] == 40 and s["new_rows"] == 40 and s["batch_evicted"] == 0, s
    # The 40 new keys were filtered, or read and not found (a false positive of the filter).
    assert s["filtered"] + (read["rows_read"] - read["rows_found"]) == 40, (s, read)
    assert s["filtered"] > 0 and read["rows_found"] == 40, (s, read)
    # Half the misses are stored below, so the call cannot have put them all in as new rows.
    assert s["staged_calls"] == 0, s


@pytest.mark.parametrize("device", DEVICES)
def test_caching_stats_carry_phases_fast_and_lower_counts(seed, device):
    row_dim = row_dim_of(DIM, ADAM)
    store = dynemb.HostStorage(row_dim)
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device)
    cached = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device,
                                 table_options=caching_opts(row_dim, store, False))
    train_together(seed, device, [plain, cached])  # ~250 distinct keys: some go down
    s = cached.caching_stats()["table"]
    p = s["phases"]
    assert sorted(p) == sorted(PHASES + ("calls", "total_ns")), p
    assert p["calls"] > 0 and p["total_ns"] > 0, p
    # The phases are laps of one stopwatch a call: together at most the calls' whole time.
    assert sum(p[k] for k in PHASES) <= p["total_ns"], p
    assert sorted(s["fast"]) == ["erased", "evictions", "refused", "rehashes", "reserved_keys"]
    assert s["fast"]["rehashes"] == 0, s["fast"]  # a cache never grows
    assert s["lower"] == store.stats() and s["lower"]["rows_written"] >= s["rows_down"] > 0, s
    for key in ("unsynced_calls", "unserved", "prefetch_refused", "prefetched", "filtered",
                "staged_prefetches", "staged_fallbacks", "staged_calls", "staged_call_fallbacks"):
        assert s[key] == 0, (key, s)  # no prefetch, no private store


def compiled(**fields):
    o = dynemb.DynamicEmbTableOptions(**fields)
    return to_embedding_options(o, DIM, UNIVERSE, ADAM, 0, "test").table


def test_options_reach_the_compiled_table_options():
    default = compiled()
    assert default.prefault_host_memory is True and default.join_contended_copies is False
    assert default.host_keys_in_flight == 0 and default.grouped_write_min_batch == 2**64 - 1
    t = compiled(prefault_host_memory=False, join_contended_copies=True,
                 grouped_write_min_batch=4096, host_keys_in_flight=1024)
    assert t.prefault_host_memory is False and t.join_contended_copies is True
    assert t.grouped_write_min_batch == 4096 and t.host_keys_in_flight == 1024
    c = caching_options(dynemb.DynamicEmbTableOptions(caching=True, private_store=True,
                                                      private_store_filter_log2_bits=20), "test")
    assert c.private_store is True and c.filter_log2_bits == 20
    assert caching_options(dynemb.DynamicEmbTableOptions(), "test").filter_log2_bits == 27
    assert caching_options(dynemb.DynamicEmbTableOptions(), "test").max_call_keys == 0
    c = caching_options(dynemb.DynamicEmbTableOptions(caching=True, max_call_keys=4096), "test")
    assert c.max_call_keys == 4096


@pytest.mark.parametrize("field, value, message", [
    ("prefault_host_memory", 0, "prefault_host_memory = 0, must be True or False"),
    ("join_contended_copies", "yes", "join_contended_copies = 'yes', must be True or False"),
    ("private_store", 1, "private_store = 1, must be True or False"),
    ("host_keys_in_flight", -1, r"host_keys_in_flight = -1, must be an int in \[0, 4294967295\]"),
    ("host_keys_in_flight", 2**32, r"host_keys_in_flight = 4294967296, must be an int in"),
    ("grouped_write_min_batch", 1.5, "grouped_write_min_batch = 1.5, must be an int >= 0"),
    ("coalesce_copies_min_batch", -2, "coalesce_copies_min_batch = -2, must be an int >= 0"),
    ("max_call_keys", -1, r"max_call_keys = -1, must be an int in \[0, 2147483647\]"),
    ("max_call_keys", 2.0, r"max_call_keys = 2.0, must be an int in"),
])
def test_bad_option_values_are_refused_by_name(field, value, message):
    with pytest.raises(dynemb.InvalidArgument, match=message):
        DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM,
                            table_options=dynemb.DynamicEmbTableOptions(**{field: value}))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("private", [False, True])
def test_max_call_keys_sizes_the_buffers_once_and_keeps_the_rows(seed, device, private):
    """A caching table built for lookups of up to max_call_keys keys grows no buffer while it
    trains on them (rows going down and coming back up), and holds the rows of one built without
    it, and of one table in memory."""
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device)
    row_dim = plain.dynemb_tables()["table"].row_dim
    modules = []
    for reserve in (0, 64):  # a step looks up at most 16 ids
        opts = caching_opts(row_dim, dynemb.HostStorage(row_dim), private)
        opts.max_call_keys = reserve
        modules.append(DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device,
                                           table_options=opts))
    train_together(seed, device, [plain] + modules)
    grown, reserved = (m.caching_stats()["table"] for m in modules)
    assert reserved["buffer_growths"] == 0, reserved
    assert grown["buffer_growths"] > 0, grown
    assert reserved["rows_down"] > 0 and reserved["lower_hits"] > 0, reserved
    for m in modules:
        assert_same_rows(plain, m)


@pytest.mark.parametrize("bits", [9, 33, True])
def test_filter_size_out_of_range_is_refused_by_name(bits):
    opts = dynemb.DynamicEmbTableOptions(caching=True, global_hbm_for_values=1 << 16,
                                         private_store=True, private_store_filter_log2_bits=bits)
    with pytest.raises(dynemb.InvalidArgument,
                       match=f"private_store_filter_log2_bits = {bits!r}, must be an int in "
                             r"\[10, 32\]"):
        DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, table_options=opts)


def test_private_store_without_a_lower_tier_is_refused():
    with pytest.raises(dynemb.InvalidArgument, match="private_store = True, but the table has no "
                                                     "lower tier"):
        DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM,
                            table_options=dynemb.DynamicEmbTableOptions(private_store=True))


@pytest.mark.parametrize("device", DEVICES)
def test_write_path_options_keep_the_rows(seed, device):
    """join_contended_copies, coalesce_copies_min_batch, grouped_write_min_batch and
    host_keys_in_flight change how a CUDA call runs, not what it stores: batches full of copies
    of hot keys (Zipf) train to the same rows as with the defaults. A CPU table accepts them and
    is unchanged by them. prefault_host_memory = False (CPU: pages taken at first write), with
    growth from one bucket, stores the same rows too."""
    plain = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device)
    variants = [
        dynemb.DynamicEmbTableOptions(join_contended_copies=True),
        dynemb.DynamicEmbTableOptions(join_contended_copies=True, coalesce_copies_min_batch=0),
        dynemb.DynamicEmbTableOptions(grouped_write_min_batch=0, host_keys_in_flight=64),
        dynemb.DynamicEmbTableOptions(prefault_host_memory=False, init_capacity=128,
                                      max_capacity=4096),
    ]
    others = [DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=ADAM, device=device,
                                  table_options=o) for o in variants]
    gen = torch.Generator().manual_seed(seed)
    for step in range(12):
        ids = zipf_ids(512, UNIVERSE, gen).to(device)  # many copies of the hottest ids
        offsets = torch.arange(0, 512, 8, dtype=torch.int64, device=device)
        ups = torch.randn((64, DIM), generator=gen).to(device)
        want = plain(ids, offsets)
        for i, m in enumerate(others):
            got = m(ids, offsets)
            torch.testing.assert_close(got, want, rtol=0, atol=0,
                                       msg=lambda msg: f"step {step}, variant {i}: {msg}")
            (got * ups).sum().backward()
        (want * ups).sum().backward()
    for m in others:
        assert_same_rows(plain, m)
    assert others[3].table_stats()["table"]["rehashes"] > 0  # it grew, with pages not prefaulted
