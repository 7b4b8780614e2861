"""Shared fixtures of the Python suite: a fresh seed per test (printed; replay with
DYNEMB_TEST_SEED), the devices to run on, and helpers that read a table's rows."""

import os
import random

import pytest
import torch

import dynemb


def pytest_report_header(config):
    return (f"torch {torch.__version__}, dynemb._C built with CUDA: {dynemb._C.built_with_cuda}, "
            f"CUDA usable: {dynemb._C.cuda_available()}")


@pytest.fixture
def seed(request):
    env = os.environ.get("DYNEMB_TEST_SEED")
    s = int(env, 0) if env else random.SystemRandom().randrange(1, 2**31)
    print(f"[SEED] {request.node.nodeid} DYNEMB_TEST_SEED={s}")
    torch.manual_seed(s)
    return s


def cuda_ready() -> bool:
    return dynemb._C.cuda_available() and torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not cuda_ready(), reason="no CUDA device / CUDA build")

DEVICES = ["cpu", pytest.param("cuda", marks=requires_cuda)]


def rows_of(module, ids: torch.Tensor, table: str = None) -> torch.Tensor:
    """The current embedding rows of `ids` in one of `module`'s tables ([n, dim], float32, on
    the module's device), asserting every id is stored."""
    tables = module.dynemb_tables()
    handle = tables[table] if table is not None else next(iter(tables.values()))
    rows, found = handle.find(ids.to(module.device))
    rows, found = torch.from_dlpack(rows), torch.from_dlpack(found)
    assert bool(found.bool().all()), "an id expected in the table is missing"
    return rows[:, : handle.dim]


def all_rows(module, table: str = None):
    """{key: full row (a float32 tensor on the host)} of every stored row."""
    tables = module.dynemb_tables()
    handle = tables[table] if table is not None else next(iter(tables.values()))
    keys, rows, scores, _ = handle.export_rows(0)
    keys, rows = torch.from_dlpack(keys), torch.from_dlpack(rows)
    return {int(k): rows[i].clone() for i, k in enumerate(keys.tolist())}


def zipf_ids(n: int, universe: int, generator=None) -> torch.Tensor:
    """n ids in [0, universe), skewed so that ids repeat (a Zipf-like draw)."""
    u = torch.rand(n, generator=generator, dtype=torch.float64)
    ids = (universe ** u - 1).floor().to(torch.int64)
    return ids.clamp_(0, universe - 1)


def same_row_dicts(got, want, table):
    """Asserts that two {key: row} dicts of `table` (all_rows) hold the same keys and rows, bit
    for bit."""
    assert sorted(got) == sorted(want), table
    for k in want:
        assert torch.equal(got[k], want[k]), f"table {table} key {k}: {got[k]} != {want[k]}"


def same_rows(x, y, tables):
    """Asserts that modules x and y hold the same keys and rows, bit for bit, in each table."""
    for t in tables:
        same_row_dicts(all_rows(x, t), all_rows(y, t), t)


def train_alike(x, y, batches, generator, device):
    """Trains modules x and y on the same batches, each step's outputs asserted equal bit for
    bit and the same random upstream gradient (drawn from `generator`) sent back through both."""
    for step, kjt in enumerate(batches):
        out_x, out_y = x(kjt).values(), y(kjt).values()
        torch.testing.assert_close(out_x, out_y, rtol=0, atol=0,
                                   msg=lambda m, step=step: f"step {step}: {m}")
        ups = torch.randn(out_y.shape, generator=generator).to(device)
        (out_x * ups).sum().backward()
        (out_y * ups).sum().backward()
