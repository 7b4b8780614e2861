"""The CUDA paths: tensors in and out on the GPU, work on the caller's current stream (and a
second stream), and agreement with the CPU backend. Skipped without a CUDA device."""

import pytest
import torch

import dynemb
from dynemb.torch import DynamicEmbeddingBag, DynamicEmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

from conftest import all_rows, requires_cuda, zipf_ids

pytestmark = requires_cuda

ADAM = {"optimizer": "adam", "learning_rate": 0.01}


def pair(params=ADAM, dim=16, universe=5000):
    opts = dynemb.DynamicEmbTableOptions(
        initializer_args=dynemb.DynamicEmbInitializerArgs(seed=1234),
        score_strategy=dynemb.DynamicEmbScoreStrategy.STEP)
    return (DynamicEmbeddingBag(universe, dim, table_options=opts, fused_params=params, device="cpu"),
            DynamicEmbeddingBag(universe, dim, table_options=opts, fused_params=params, device="cuda"))


def test_cpu_and_gpu_agree_over_training_steps(seed):
    cpu, gpu = pair()
    for _ in range(5):
        ids = zipf_ids(256 * 8, 5000).view(256, 8)
        up = torch.randn(256, 16)
        a = cpu(ids)
        b = gpu(ids.cuda())
        assert b.is_cuda
        torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)
        (a * up).sum().backward()
        (b * up.cuda()).sum().backward()
    ra, rb = all_rows(cpu), all_rows(gpu)
    assert ra.keys() == rb.keys()
    for k in ra:
        torch.testing.assert_close(rb[k].cpu(), ra[k], rtol=1e-5, atol=1e-6)


def test_work_follows_the_current_stream(seed):
    # The ids are written on a side stream after a long sleep; a lookup on any other stream
    # would read them before they land.
    _, gpu = pair(dim=8)
    src = zipf_ids(4096, 5000).cuda()
    gpu(src.view(512, 8))  # training forward: every id gets its own (random) row
    gpu.eval()
    expected = gpu(src.view(512, 8))
    assert float(expected.abs().sum()) > 0.0
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        ids = torch.zeros_like(src)
        torch.cuda._sleep(50_000_000)
        ids.copy_(src)
        out = gpu(ids.view(512, 8))
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(out, expected)


def test_training_on_a_second_stream_matches_the_default_stream(seed):
    a, _ = pair()
    _, g1 = pair()
    _, g2 = pair()
    data = [(zipf_ids(128 * 4, 5000).view(128, 4), torch.randn(128, 16)) for _ in range(4)]
    for ids, up in data:
        (g1(ids.cuda()) * up.cuda()).sum().backward()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        for ids, up in data:
            ids_c, up_c = ids.cuda(non_blocking=True), up.cuda(non_blocking=True)
            (g2(ids_c) * up_c).sum().backward()
    side.synchronize()
    r1, r2 = all_rows(g1), all_rows(g2)
    assert r1.keys() == r2.keys()
    assert all(torch.equal(r1[k], r2[k]) for k in r1)


def test_cuda_inputs_are_required_on_the_tables_device(seed):
    _, gpu = pair()
    with pytest.raises(dynemb.InvalidArgument, match="device"):
        gpu(torch.randint(0, 10, (4, 2)))  # CPU ids for a GPU table


def test_collection_on_gpu_matches_cpu(seed):
    configs = [EmbeddingBagConfig(name="a", embedding_dim=8, num_embeddings=1000, feature_names=["a"]),
               EmbeddingBagConfig(name="b", embedding_dim=24, num_embeddings=1000, feature_names=["b"])]
    opts = dynemb.DynamicEmbTableOptions(initializer_args=dynemb.DynamicEmbInitializerArgs(seed=7))
    cpu = DynamicEmbeddingBagCollection(configs, table_options=opts, device="cpu")
    gpu = DynamicEmbeddingBagCollection(configs, table_options=opts, device="cuda")
    lengths = torch.randint(0, 5, (2 * 64,))
    kjt = KeyedJaggedTensor(["a", "b"], zipf_ids(int(lengths.sum()), 1000), lengths=lengths)
    a = cpu(kjt).values()
    b = gpu(kjt.to("cuda")).values()
    assert b.is_cuda
    torch.testing.assert_close(b.cpu(), a, rtol=1e-5, atol=1e-6)


def test_checkpoint_from_cpu_loads_on_gpu_and_back(seed, tmp_path):
    cpu, gpu = pair()
    for _ in range(3):
        ids = zipf_ids(64 * 4, 5000).view(64, 4)
        cpu(ids).sum().backward()
    dynemb.DynamicEmbDump(str(tmp_path / "c"), cpu, optim=True)
    dynemb.DynamicEmbLoad(str(tmp_path / "c"), gpu, optim=True)
    ra, rb = all_rows(cpu), all_rows(gpu)
    assert ra.keys() == rb.keys()
    assert all(torch.equal(ra[k], rb[k].cpu()) for k in ra)
    ids = zipf_ids(64 * 4, 5000).view(64, 4)
    torch.testing.assert_close(gpu(ids.cuda()).cpu(), cpu(ids), rtol=1e-5, atol=1e-6)
