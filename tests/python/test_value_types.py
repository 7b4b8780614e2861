"""embedding_dtype (float16 / bfloat16 rows) and deterministic_backward from Python.

16-bit rows against a PyTorch model that stores its weights in the same dtype (float32
arithmetic, round to nearest even on every store: within one unit in the last place, the
gradient sums' order aside) and against a float32 run (within the rounding of every store);
the unordered backward against the ordered one (float32 tolerance); bad values named."""

import pytest
import torch
import torch.nn.functional as F

import dynemb
from dynemb.torch import (
    DynamicEmbeddingBag,
    DynamicEmbeddingBagCollection,
    EmbeddingBagConfig,
    KeyedJaggedTensor,
)

from conftest import DEVICES, rows_of, zipf_ids

UNIVERSE, DIM, BATCH, BAG, STEPS, LR = 200, 16, 32, 4, 20, 0.05
HALF_TYPES = [torch.float16, torch.bfloat16]


def stored_rows(module, ids: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The embedding elements of `ids` as stored ([n, DIM] of `dtype`): the rows' leading
    words reinterpreted (two 16-bit elements a word, element 2w in the low half)."""
    handle = next(iter(module.dynemb_tables().values()))
    raw, found = handle.find(ids.to(module.device))
    raw, found = torch.from_dlpack(raw), torch.from_dlpack(found)
    assert bool(found.bool().all()), "an id expected in the table is missing"
    words = (DIM + 1) // 2
    return raw[:, :words].contiguous().view(torch.int32).view(dtype)[:, :DIM]


def stored_within_one_ulp(module, ids, model, dtype, step):
    """The rows `module` stores for `ids`, after asserting each is within one unit in the last
    place of `model` (a float32 gradient summed in another order may round the other way)."""
    stored = stored_rows(module, ids, dtype).cpu()
    ulp = torch.finfo(dtype).eps * model.double().abs() + torch.finfo(dtype).tiny
    bad = (stored.double() - model.double()).abs() > ulp
    assert not bool(bad.any()), (
        f"step {step}: {int(bad.sum())} elements differ from PyTorch's by more than 1 ulp")
    return stored


def bag(dtype, device, **options):
    opts = dynemb.DynamicEmbTableOptions(embedding_dtype=dtype, **options)
    return DynamicEmbeddingBag(UNIVERSE, DIM, mode="sum", table_options=opts, device=device,
                               fused_params={"optimizer": "sgd", "learning_rate": LR})


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_half_rows_follow_pytorch_and_float32(seed, device, dtype):
    full, half = bag(torch.float32, device), bag(dtype, device)
    every = torch.arange(UNIVERSE, dtype=torch.int64)
    with torch.no_grad():  # inserts every id with its initial row (train mode)
        full(every.view(-1, 1).to(device))
        half(every.view(-1, 1).to(device))
    start = rows_of(full, every).cpu().double()
    # The initial rows are the float32 initializer's, rounded to nearest even.
    model = start.to(dtype)
    assert torch.equal(stored_rows(half, every, dtype).cpu(), model)
    eps = torch.finfo(dtype).eps
    gen = torch.Generator().manual_seed(seed)
    for step in range(STEPS + 1):
        # The model then goes on from the stored rows (no drift between them).
        model = stored_within_one_ulp(half, every, model, dtype, step)
        if step == STEPS:
            break
        ids = zipf_ids(BATCH * BAG, UNIVERSE, gen).view(BATCH, BAG)
        upstream = torch.randn(BATCH, DIM, generator=gen)
        out_half = half(ids.to(device))
        # PyTorch: pooled in float32 from the stored dtype rows.
        w = model.to(torch.float32).requires_grad_(True)
        want = F.embedding_bag(ids, w, mode="sum")
        torch.testing.assert_close(out_half.detach().cpu(), want.detach(), rtol=1e-6, atol=1e-6,
                                   msg=lambda m: f"step {step}: {m}")
        (out_half * upstream.to(device)).sum().backward()
        (want * upstream).sum().backward()
        model = (w.detach() - LR * w.grad).to(dtype)  # SGD, the result stored as dtype
        full(ids.to(device)).mul(upstream.to(device)).sum().backward()
    # Against float32: each of the STEPS + 1 stores rounds by at most half a unit.
    got = model.double()
    ref = rows_of(full, every).cpu().double()
    bound = (STEPS + 1) * eps / 2 * ref.abs().max()
    assert float((got - ref).abs().max()) <= bound


def test_half_rows_round_trip_a_checkpoint(seed, tmp_path):
    half = bag(torch.float16, "cpu")
    gen = torch.Generator().manual_seed(seed)
    ids = zipf_ids(BATCH * BAG, UNIVERSE, gen).view(BATCH, BAG)
    half(ids).sum().backward()
    dynemb.DynamicEmbDump(str(tmp_path / "h"), half, optim=True)
    back = bag(torch.float16, "cpu")
    dynemb.DynamicEmbLoad(str(tmp_path / "h"), back, optim=True)
    stored = ids.unique()
    assert torch.equal(stored_rows(back, stored, torch.float16),
                       stored_rows(half, stored, torch.float16))


def keyed(keys, gen, device):
    lengths = torch.randint(0, 2 * BAG, (len(keys) * BATCH,), generator=gen)
    values = zipf_ids(int(lengths.sum()), UNIVERSE, gen)
    return KeyedJaggedTensor(keys, values.to(device), lengths=lengths.to(device))


@pytest.mark.parametrize("group_tables", [False, True], ids=["separate", "grouped"])
@pytest.mark.parametrize("device", DEVICES)
def test_unordered_backward_follows_the_ordered_one(seed, device, group_tables):
    configs = [EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=UNIVERSE,
                                  feature_names=[n]) for n in ("x", "y")]
    adam = {"optimizer": "adam", "learning_rate": 0.01}
    modules = {
        flag: DynamicEmbeddingBagCollection(
            configs, fused_params=adam, device=device, group_tables=group_tables,
            table_options=dynemb.DynamicEmbTableOptions(deterministic_backward=flag))
        for flag in (True, False)
    }
    gen = torch.Generator().manual_seed(seed)
    for step in range(STEPS):
        kjt = keyed(["x", "y"], gen, device)
        upstream = torch.randn(BATCH, 2 * DIM, generator=gen).to(device)
        for m in modules.values():
            (m(kjt).values() * upstream).sum().backward()
    every = torch.arange(UNIVERSE, dtype=torch.int64)
    for t in ("x", "y"):
        found = [torch.from_dlpack(m.dynemb_tables()[t].find(every.to(device))[1]).bool().cpu()
                 for m in modules.values()]
        assert torch.equal(found[0], found[1]), t
        ids = every[found[0]]
        ordered = rows_of(modules[True], ids, t)
        unordered = rows_of(modules[False], ids, t)
        torch.testing.assert_close(unordered, ordered, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"table {t}: {m}")


def test_tables_of_other_value_types_group_apart(seed):
    configs = [EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=UNIVERSE,
                                  feature_names=[n]) for n in ("a", "b", "c")]
    options = {"a": dynemb.DynamicEmbTableOptions(),
               "b": dynemb.DynamicEmbTableOptions(embedding_dtype=torch.bfloat16),
               "c": dynemb.DynamicEmbTableOptions(deterministic_backward=False)}
    grouped = DynamicEmbeddingBagCollection(configs, table_options=options, group_tables=True)
    separate = DynamicEmbeddingBagCollection(configs, table_options=options)
    assert len(grouped._groups) == 3
    gen = torch.Generator().manual_seed(seed)
    for _ in range(3):
        kjt = keyed(["a", "b", "c"], gen, "cpu")
        out_g, out_s = grouped(kjt).values(), separate(kjt).values()
        torch.testing.assert_close(out_g, out_s, rtol=0, atol=0)
        out_g.sum().backward()
        out_s.sum().backward()


@pytest.mark.parametrize("field,value", [
    ("embedding_dtype", torch.int32),
    ("embedding_dtype", torch.float64),
    ("embedding_dtype", "float16"),
    ("embedding_dtype", [torch.float16]),
    ("deterministic_backward", "yes"),
    ("deterministic_backward", None),
    ("stochastic_rounding", 1),
    ("state_in_value_type", "yes"),
])
def test_bad_value_options_name_the_field(field, value):
    opts = dynemb.DynamicEmbTableOptions(**{field: value})
    with pytest.raises(dynemb.InvalidArgument, match=f"{field} = "):
        DynamicEmbeddingBag(UNIVERSE, DIM, table_options=opts)


@pytest.mark.parametrize("device", DEVICES)
def test_bfloat16_state_follows_float32_state(seed, device):
    """state_in_value_type: bfloat16 rows with bfloat16 Adam state train like bfloat16 rows
    with float32 state, within the rounding of the state (docs/value_types.md); the rows are
    smaller; float16 is refused by name."""
    def adam_bag(**options):
        opts = dynemb.DynamicEmbTableOptions(embedding_dtype=torch.bfloat16, **options)
        return DynamicEmbeddingBag(UNIVERSE, DIM, mode="sum", table_options=opts, device=device,
                                   fused_params={"optimizer": "adam", "learning_rate": 0.01})
    full, half = adam_bag(), adam_bag(state_in_value_type=True)
    full_handle = next(iter(full.dynemb_tables().values()))
    half_handle = next(iter(half.dynemb_tables().values()))
    assert half_handle.row_dim < full_handle.row_dim
    gen = torch.Generator().manual_seed(seed)
    target = torch.randn(BATCH, DIM, generator=gen, dtype=torch.float64) * 0.1
    every = torch.arange(UNIVERSE, dtype=torch.int64)
    with torch.no_grad():  # inserts every id with its initial row (train mode)
        full(every.view(-1, 1).to(device))
        half(every.view(-1, 1).to(device))
    for step in range(STEPS):
        ids = zipf_ids(BATCH * BAG, UNIVERSE, gen).view(BATCH, BAG)
        for module in (full, half):
            out = module(ids.to(device))
            loss = ((out.double() - target.to(device)) ** 2).sum()
            loss.backward()
    a = stored_rows(full, every, torch.bfloat16).cpu().double()
    b = stored_rows(half, every, torch.bfloat16).cpu().double()
    # Every stored weight within a few units of bfloat16 (2^-7 relative) of the other run.
    unit = 2.0 ** -7
    diff = (a - b).abs()
    assert float(diff.pow(2).mean().sqrt()) <= 4 * unit * max(1.0, float(a.abs().max()))
    with pytest.raises(dynemb.InvalidArgument, match="state_in_value_type"):
        DynamicEmbeddingBag(UNIVERSE, DIM, table_options=dynemb.DynamicEmbTableOptions(
            embedding_dtype=torch.float16, state_in_value_type=True), device=device)


@pytest.mark.parametrize("dtype", HALF_TYPES, ids=["float16", "bfloat16"])
@pytest.mark.parametrize("device", DEVICES)
def test_half_outputs_follow_pytorch(seed, device, dtype):
    """output_dtype = the rows' 16-bit dtype: lookups return that dtype (the float32 sum rounded
    once to nearest even, as a PyTorch model summing the stored rows in float32 and casting),
    the backward takes gradients of that dtype (their float32 values summed: the model's weight
    gradient from the cast gradient), and the rows follow the model within one unit in the last
    place, the gradient sums' order aside."""
    half = bag(dtype, device, output_dtype=dtype)
    every = torch.arange(UNIVERSE, dtype=torch.int64)
    with torch.no_grad():  # inserts every id with its initial row (train mode)
        first = half(every.view(-1, 1).to(device))
    assert first.dtype == dtype
    model = stored_rows(half, every, dtype).cpu()
    eps = torch.finfo(dtype).eps
    gen = torch.Generator().manual_seed(seed)
    for step in range(STEPS):
        ids = zipf_ids(BATCH * BAG, UNIVERSE, gen).view(BATCH, BAG)
        upstream = torch.randn(BATCH, DIM, generator=gen).to(dtype)
        out = half(ids.to(device))
        assert out.dtype == dtype
        w = model.to(torch.float32).requires_grad_(True)
        want = F.embedding_bag(ids, w, mode="sum")
        # Rounded once from a float32 sum (PyTorch's may add in another order: one unit).
        got = out.detach().cpu().double()
        ulp = eps * got.abs() + torch.finfo(dtype).tiny
        assert bool(((got - want.detach().to(dtype).double()).abs() <= ulp).all()), step
        (out * upstream.to(device)).sum().backward()
        (want * upstream.to(torch.float32)).sum().backward()
        model = (w.detach() - LR * w.grad).to(dtype)
        model = stored_within_one_ulp(half, every, model, dtype, step)


@pytest.mark.parametrize("device", DEVICES)
def test_half_outputs_group_like_separate_tables(seed, device):
    """Grouped collections of bfloat16 outputs return and take bfloat16 like separate tables,
    bit for bit; tables of float32 outputs group apart from them."""
    configs = [EmbeddingBagConfig(name=n, embedding_dim=DIM, num_embeddings=UNIVERSE,
                                  feature_names=[n]) for n in ("x", "y", "z")]
    half = dynemb.DynamicEmbTableOptions(embedding_dtype=torch.bfloat16,
                                         output_dtype=torch.bfloat16)
    options = {"x": half, "y": half,
               "z": dynemb.DynamicEmbTableOptions(embedding_dtype=torch.bfloat16)}
    adam = {"optimizer": "adam", "learning_rate": 0.01}
    grouped = DynamicEmbeddingBagCollection(configs, table_options=options, group_tables=True,
                                            fused_params=adam, device=device)
    separate = DynamicEmbeddingBagCollection(configs, table_options=options, fused_params=adam,
                                             device=device)
    assert len(grouped._groups) == 2
    gen = torch.Generator().manual_seed(seed)
    for _ in range(4):
        kjt = keyed(["x", "y", "z"], gen, device)
        upstream = torch.randn(BATCH, 3 * DIM, generator=gen).to(device)
        out_g, out_s = grouped(kjt), separate(kjt)
        for t in ("x", "y"):
            assert out_g[t].dtype == torch.bfloat16 and out_s[t].dtype == torch.bfloat16
        assert out_g["z"].dtype == torch.float32
        torch.testing.assert_close(out_g.values(), out_s.values(), rtol=0, atol=0)
        (out_g.values().float() * upstream).sum().backward()
        (out_s.values().float() * upstream).sum().backward()
    every = torch.arange(UNIVERSE, dtype=torch.int64)
    for t in ("x", "y", "z"):
        found = torch.from_dlpack(grouped.dynemb_tables()[t].find(every.to(device))[1])
        ids = every[found.bool().cpu()]
        assert torch.equal(rows_of(grouped, ids, t), rows_of(separate, ids, t)), t


@pytest.mark.parametrize("options,dim,match", [
    ({"output_dtype": torch.bfloat16}, DIM, "output_dtype = "),
    ({"embedding_dtype": torch.float16, "output_dtype": torch.bfloat16}, DIM, "output_dtype = "),
    ({"embedding_dtype": torch.bfloat16, "output_dtype": "bf16"}, DIM, "output_dtype = "),
    ({"embedding_dtype": torch.bfloat16, "output_dtype": torch.bfloat16}, 13, "even dim"),
])
def test_bad_output_dtypes_are_refused(options, dim, match):
    with pytest.raises(dynemb.InvalidArgument, match=match):
        DynamicEmbeddingBag(UNIVERSE, dim,
                            table_options=dynemb.DynamicEmbTableOptions(**options))
