"""Sharded collections over a torch.distributed process group: 1, 2 and 3 processes on the CPU
(gloo, a free loopback port), 1 and 2 on CUDA (NCCL, one GPU per rank; skipped without them).
Each rank checks itself against an unsharded twin (sharded_worker.py); a rank that fails or
hangs fails the test."""

import socket
import time

import pytest
import torch
import torch.multiprocessing as mp

import sharded_worker
from conftest import cuda_ready

# A hang (a rank waiting in a collective the others left) fails instead of stalling CI.
TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(world: int, seed: int, device: str):
    context = mp.start_processes(sharded_worker.run, args=(world, free_port(), seed, device),
                                 nprocs=world, join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    # join raises (with the rank's traceback) as soon as one rank fails, ending the others.
    while not context.join(timeout=2):
        if time.monotonic() > deadline:
            for p in context.processes:
                if p.is_alive():
                    p.kill()
            pytest.fail(f"the {world} ranks did not finish within {TIMEOUT_S} s (a hang)")


@pytest.mark.parametrize("world", [1, 2, 3])
def test_sharded_cpu_matches_unsharded(seed, world):
    run_ranks(world, seed, "cpu")


def _gpus() -> int:
    return torch.cuda.device_count() if cuda_ready() else 0


@pytest.mark.parametrize("world", [1, 2])
def test_sharded_cuda_matches_unsharded(seed, world):
    if _gpus() < world:
        pytest.skip(f"needs {world} CUDA device(s) and a CUDA build, found {_gpus()}")
    import dynemb

    if not dynemb._C.nccl_available():
        pytest.skip("this dynemb module was built without NCCL")
    run_ranks(world, seed, "cuda")
