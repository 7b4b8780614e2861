"""dynemb.wholememory against PyTorch: gather / scatter and files on one rank and on two forked
ranks of a socket group (every type on the host; the device location where CUDA is), and
SGD training against a torch index_add_ reference."""

import os
import tempfile

import pytest
import torch

import dynemb
from dynemb import wholememory as wm

from conftest import cuda_ready

TYPES = ["continuous", "chunked", "distributed"]
PLACES = [("host", "cpu"), pytest.param(("device", "cuda"), marks=pytest.mark.skipif(
    not cuda_ready(), reason="no CUDA device / CUDA build"))]


def run_ranks(world_size, body):
    """Runs body(group) in `world_size` forked processes joined by a socket group; fails when
    any rank fails (its exception printed). Skips where this process has a CUDA device: a child
    forked after the parent initialized CUDA cannot use it, and the ranks register their host
    memory with CUDA (seen on the H200s: cudaErrorInitializationError). There the MPI binary
    dynemb_wholememory_mpi_tests covers the same cases with CUDA in every rank."""
    if cuda_ready():
        pytest.skip("forked ranks cannot use CUDA initialized by the parent "
                    "(dynemb_wholememory_mpi_tests covers this on GPU machines)")
    job = f"pytest{os.getpid()}{torch.randint(0, 2**31, (1,)).item()}"
    pids = []
    for rank in range(world_size):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                body(wm.Group.socket(job, rank, world_size))
            except BaseException as e:  # noqa: BLE001 - reported through the exit code
                print(f"rank {rank}: {e!r}", flush=True)
                code = 1
            os._exit(code)
        pids.append(pid)
    codes = [os.waitpid(pid, 0)[1] for pid in pids]
    assert codes == [0] * world_size


@pytest.mark.parametrize("type_", TYPES)
@pytest.mark.parametrize("place", PLACES)
def test_one_rank_gather_scatter_files(seed, type_, place):
    location, device = place
    g = torch.Generator().manual_seed(seed)
    rows, cols = int(torch.randint(1, 3000, (1,), generator=g)), int(torch.randint(1, 20, (1,), generator=g))
    reference = torch.randn(rows, cols, generator=g)
    t = wm.WholeTensor(wm.Group.local(), [rows, cols], type=type_, location=location)
    order = torch.randperm(rows, generator=g)
    t.scatter(reference[order].to(device), order.to(device))
    ask = torch.randint(0, rows, (4000,), generator=g)
    assert torch.equal(t.gather(ask.to(device)).cpu(), reference[ask])
    with pytest.raises(dynemb.InvalidArgument):
        t.gather(torch.tensor([rows], device=device))
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "rows.bin")
        t.store_to_file(path)
        assert torch.equal(torch.from_file(path, size=rows * cols, dtype=torch.float32).view(rows, cols), reference)
        u = wm.WholeTensor(wm.Group.local(), [rows, cols], type=type_, location=location)
        u.load_from_files([path])
        assert torch.equal(u.gather(torch.arange(rows, device=device)).cpu(), reference)


@pytest.mark.parametrize("type_", TYPES)
def test_two_ranks_host(seed, type_):
    rows, cols = 5000, 7
    reference = torch.randn(rows, cols, generator=torch.Generator().manual_seed(seed))

    def body(group):
        t = wm.WholeTensor(group, [rows, cols], type=type_, location="host")
        mine = torch.arange(group.rank, rows, group.world_size)
        t.scatter(reference[mine], mine)
        group.barrier()
        ask = torch.randint(0, rows, (3000,), generator=torch.Generator().manual_seed(seed + group.rank))
        assert torch.equal(t.gather(ask), reference[ask])
        group.barrier()

    run_ranks(2, body)


@pytest.mark.parametrize("type_", TYPES)
def test_two_ranks_sgd_against_index_add(seed, type_):
    rows, dim, lr, steps = 800, 6, 0.1, 3
    gen = torch.Generator().manual_seed(seed)
    batches = [[(torch.randint(0, rows, (300,), generator=gen), torch.randn(300, dim, generator=gen))
                for _ in range(2)] for _ in range(steps)]

    def body(group):
        e = wm.WholeEmbedding(group, rows, dim, {"optimizer": "sgd", "learning_rate": lr},
                              seed=seed, type=type_, location="host", cache_ratio=0.5,
                              cache_on="cpu")
        expect = e.lookup(torch.arange(rows)).double()  # the initial rows
        for step in batches:
            ids, grads = step[group.rank]
            e.lookup(ids)  # fills the cache, which the step keeps coherent
            e.apply_gradients(ids, grads)
            for ids_r, grads_r in step:
                expect.index_add_(0, ids_r, grads_r.double(), alpha=-lr)
        got = e.lookup(torch.arange(rows)).double()
        assert torch.allclose(got, expect, atol=1e-5), (got - expect).abs().max()
        assert e.cache_stats()["hits"] > 0

    run_ranks(2, body)
