"""One rank of the sharded-collection test: trains dynemb.torch collections sharded over a
torch.distributed process group and, on every rank, an unsharded twin on all ranks' batches
concatenated; asserts the same outputs, the same rows (with optimizer state) and the same
pooled forward as torch.nn.functional.embedding_bag, an empty batch on one rank, and failures
(mismatched tables, a bad batch) raised on every rank without a hang.

Run by tests/python/test_sharded.py (torch.multiprocessing, a free loopback port) and directly
under torchrun:  torchrun --nproc_per_node=2 tests/python/sharded_worker.py [--device cuda]
"""

import argparse
import datetime
import os
import shutil
import sys
import tempfile

import torch
import torch.distributed as dist
import torch.nn.functional as F

import dynemb
from dynemb.torch import (
    DynamicEmbeddingBagCollection,
    DynamicEmbeddingCollection,
    EmbeddingBagConfig,
    EmbeddingConfig,
    KeyedJaggedTensor,
)

NUM_EMBEDDINGS = 1000
UNIVERSE = 300
ADAM = {"optimizer": "adam", "learning_rate": 0.05, "eps": 1e-6}
ROWWISE = {"optimizer": "rowwise_adagrad", "learning_rate": 0.1, "eps": 1e-6}
SGD = {"optimizer": "sgd", "learning_rate": 0.3}


def note(message):
    """Progress, with DYNEMB_WORKER_VERBOSE=1 (where a rank stopped, on the GPU machine)."""
    if os.environ.get("DYNEMB_WORKER_VERBOSE"):
        print(f"[rank {dist.get_rank()}] {message}", flush=True)


def zipf(n, gen):
    u = torch.rand(n, generator=gen, dtype=torch.float64)
    return ((UNIVERSE ** u) - 1).floor().to(torch.int64).clamp_(0, UNIVERSE - 1)


class Batch:
    """One rank's ids: per key a list of bag lengths, ids and weights."""

    def __init__(self, keys, bags, max_len, gen, weighted):
        self.keys = keys
        self.lengths = {k: torch.randint(0, max_len + 1, (bags,), generator=gen) for k in keys}
        self.values = {k: zipf(int(self.lengths[k].sum()), gen) for k in keys}
        self.weights = ({k: torch.rand(self.values[k].numel(), generator=gen) for k in keys}
                        if weighted else None)

    def kjt(self, device, keys=None):
        keys = keys or self.keys
        return _kjt(keys, [self.lengths[k] for k in keys], [self.values[k] for k in keys],
                    None if self.weights is None else [self.weights[k] for k in keys], device)


def _kjt(keys, lengths, values, weights, device):
    w = None if weights is None else torch.cat(weights).to(device)
    return KeyedJaggedTensor(keys, torch.cat(values).to(device), weights=w,
                             lengths=torch.cat(lengths).to(device))


def concatenated(batches, device):
    """Every rank's bags, rank after rank within each key (what one process trains on)."""
    keys = batches[0].keys
    lengths = [torch.cat([b.lengths[k] for b in batches]) for k in keys]
    values = [torch.cat([b.values[k] for b in batches]) for k in keys]
    weights = (None if batches[0].weights is None else
               [torch.cat([b.weights[k] for b in batches]) for k in keys])
    return _kjt(keys, lengths, values, weights, device)


def draw_batches(seed, step, world, keys, weighted, empty_rank):
    """Every rank's batch of a step (every rank draws all of them from the shared seed). The
    empty rank gets bags without ids at step 1 and no bags at all at step 2."""
    batches = []
    for r in range(world):
        gen = torch.Generator().manual_seed(seed * 1000 + step * 16 + r)
        bags = 0 if (r == empty_rank and step == 2) else 6 + r
        b = Batch(keys, bags, 4, gen, weighted)
        if r == empty_rank and step == 1:
            for k in keys:
                b.lengths[k].zero_()
                b.values[k] = b.values[k][:0]
                if b.weights is not None:
                    b.weights[k] = b.weights[k][:0]
        batches.append(b)
    return batches


def rows_of_reference(module, table):
    keys, rows, _, _ = module.dynemb_tables()[table].export_rows(0)
    keys, rows = torch.from_dlpack(keys), torch.from_dlpack(rows)
    return {int(k): rows[i].clone() for i, k in enumerate(keys.tolist())}


def gathered_shards(module, table, group=None):
    """{key: row} over every rank's shard; asserts each key is on its owner and only there."""
    keys, rows = module.shard_rows(table)
    rank = dist.get_rank(group)
    for k in keys[:50].tolist():
        assert module.owner_rank(table, k) == rank, f"{table}: key {k} stored on rank {rank}"
    parts = [None] * dist.get_world_size(group)
    dist.all_gather_object(parts, (keys.tolist(), rows.clone()), group=group)
    merged = {}
    for ks, rs in parts:
        for i, k in enumerate(ks):
            assert k not in merged, f"{table}: key {k} stored on two ranks"
            merged[k] = rs[i]
    return merged


def assert_same_rows(sharded, reference, table, what, group=None):
    got, want = gathered_shards(sharded, table, group), rows_of_reference(reference, table)
    assert sorted(got) == sorted(want), (
        f"{what} {table}: keys differ: {len(got)} sharded, {len(want)} unsharded")
    a = torch.stack([got[k] for k in sorted(want)]).double()
    b = torch.stack([want[k] for k in sorted(want)]).double()
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=lambda m: f"{what} {table}: {m}")
    return got


def run_bags(seed, device, exchange, router, weighted, fused, empty_rank, bad_batch_step,
             checkpoint_dir=None):
    rank, world = dist.get_rank(), dist.get_world_size()
    modes = ["SUM", "SUM", "SUM"] if weighted else ["SUM", "MEAN", "SUM"]
    configs = [
        EmbeddingBagConfig(name="t_a", embedding_dim=8, num_embeddings=NUM_EMBEDDINGS,
                           feature_names=["fa", "fb"], pooling=modes[0]),
        EmbeddingBagConfig(name="t_b", embedding_dim=8, num_embeddings=NUM_EMBEDDINGS,
                           feature_names=["fc"], pooling=modes[1]),
        EmbeddingBagConfig(name="t_c", embedding_dim=4, num_embeddings=NUM_EMBEDDINGS,
                           feature_names=["fd"], pooling=modes[2]),
    ]
    keys = ["fd", "fa", "fc", "fb"]  # not the tables' order: the collection regroups them
    what = f"bags[{exchange}, {router}, weighted={weighted}, {fused['optimizer']}]"
    sharded = DynamicEmbeddingBagCollection(configs, fused_params=fused, device=device,
                                            is_weighted=weighted, pg=dist.group.WORLD,
                                            router=router, exchange=exchange)
    assert sharded.is_sharded and len(sharded.stage_times()) == 2  # dims 8 and 4: two groups
    reference = DynamicEmbeddingBagCollection(configs, fused_params=fused, device=device,
                                              is_weighted=weighted)
    for step in range(4):
        note(f"{what} step {step}")
        batches = draw_batches(seed, step, world, keys, weighted, empty_rank)
        if step == bad_batch_step:
            # The last rank's batch lacks a feature: it raises its own error, every other rank
            # an error naming it, and no table changes.
            mine = batches[rank].kjt(device, keys[:-1] if rank == world - 1 else None)
            try:
                sharded(mine)
            except dynemb.Error as e:
                if rank == world - 1:
                    assert "missing" in str(e), str(e)
                else:
                    assert f"rank(s) {world - 1} refused" in str(e), str(e)
            else:
                raise AssertionError(f"{what}: rank {rank}: a bad batch on rank {world - 1} "
                                     "did not raise here")
        out = sharded(batches[rank].kjt(device)).values()
        ref_out = reference(concatenated(batches, device)).values()
        first = sum(int(b.lengths[keys[0]].numel()) for b in batches[:rank])
        mine = ref_out[first:first + out.shape[0]]
        torch.testing.assert_close(out.double(), mine.detach().double(), rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{what} step {step} output: {m}")
        gen = torch.Generator().manual_seed(seed + 7 * step)
        ups = torch.randn(ref_out.shape, generator=gen).to(device)
        (out * ups[first:first + out.shape[0]]).sum().backward()
        (ref_out * ups).sum().backward()
    note(f"{what} rows")
    rows = {}
    for t in ("t_a", "t_b", "t_c"):
        rows[t] = assert_same_rows(sharded, reference, t, what)
    if checkpoint_dir is not None:
        check_checkpoints(sharded, reference, configs, fused, weighted, router, exchange,
                          checkpoint_dir, what)
    sizes = sharded.global_table_sizes()
    for t in ("t_a", "t_b", "t_c"):
        assert sizes[t] == reference.table_stats()[t]["size"], (t, sizes, reference.table_stats())
    # The pooled forward against PyTorch's embedding_bag over the gathered rows (evaluation:
    # every key of the last batch is stored).
    sharded.eval()
    with torch.no_grad():
        kt = sharded(batches[rank].kjt(device))
    owner = {"fa": "t_a", "fb": "t_a", "fc": "t_b", "fd": "t_c"}
    for f in keys:
        t = owner[f]
        b = batches[rank]
        if b.values[f].numel() == 0:
            continue
        universe = sorted(rows[t])
        index = {k: i for i, k in enumerate(universe)}
        dim = kt[f].shape[1]
        weight = torch.stack([rows[t][k][:dim] for k in universe]).double()
        ids = torch.tensor([index[int(k)] for k in b.values[f].tolist()], dtype=torch.int64)
        offsets = torch.cat([torch.zeros(1, dtype=torch.int64), b.lengths[f].cumsum(0)[:-1]])
        psw = None if b.weights is None else b.weights[f].double()
        mode = modes[[c.name for c in configs].index(t)].lower()
        want = F.embedding_bag(ids, weight, offsets, mode=mode, per_sample_weights=psw)
        torch.testing.assert_close(kt[f].cpu().double(), want, rtol=1e-5, atol=1e-6,
                                   msg=lambda m: f"{what} embedding_bag {f}: {m}")


def check_checkpoints(sharded, reference, configs, fused, weighted, router, exchange, path, what):
    """Every rank dumps its shards at once; a fresh collection over every rank, and one over
    all ranks but the last (another world size: keys re-routed), load it and hold the trained
    rows; incremental_dump's shards together are the reference's rows."""
    rank, world = dist.get_rank(), dist.get_world_size()
    note(f"{what} dump")
    dynemb.DynamicEmbDump(path, sharded, optim=True, pg=dist.group.WORLD)
    device = sharded.device

    def fresh(group):
        return DynamicEmbeddingBagCollection(configs, fused_params=fused, device=device,
                                             is_weighted=weighted, pg=group, router=router,
                                             exchange=exchange)

    same = fresh(dist.group.WORLD)
    note(f"{what} load")
    dynemb.DynamicEmbLoad(path, same, optim=True, pg=dist.group.WORLD)
    for t in ("t_a", "t_b", "t_c"):
        assert_same_rows(same, reference, t, what + " loaded")
    # new_group is collective over every rank, members or not.
    smaller = dist.new_group(list(range(max(world - 1, 1))))
    if rank < max(world - 1, 1):
        note(f"{what} load at {max(world - 1, 1)} ranks")
        fewer = fresh(smaller)
        dynemb.DynamicEmbLoad(path, fewer, optim=True, pg=smaller)
        for t in ("t_a", "t_b", "t_c"):
            assert_same_rows(fewer, reference, t, what + f" loaded at {max(world - 1, 1)} ranks",
                             group=smaller)
    delta = dynemb.incremental_dump(sharded, 0)[""]
    parts = [None] * world
    dist.all_gather_object(parts, [(k.tolist(), v.clone(), s) for k, v, s in
                                   zip(delta.keys, delta.values, delta.optimizer_states)])
    for i, t in enumerate(delta.table_names):
        want = rows_of_reference(reference, t)
        got = {}
        for part in parts:
            keys, values, states = part[i]
            for j, k in enumerate(keys):
                got[k] = torch.cat([values[j], states[j]]) if states is not None else values[j]
        assert sorted(got) == sorted(want), f"{what} incremental_dump {t}: keys differ"
        for k, row in got.items():
            torch.testing.assert_close(row.double(), want[k][:row.numel()].double(), rtol=1e-5,
                                       atol=1e-6)
    scores = dynemb.get_score(sharded)[""]
    assert sorted(scores) == ["t_a", "t_b", "t_c"], scores


def run_sequence(seed, device, router, empty_rank):
    rank, world = dist.get_rank(), dist.get_world_size()
    configs = [
        EmbeddingConfig(name="s_a", embedding_dim=8, num_embeddings=NUM_EMBEDDINGS,
                        feature_names=["qa", "qb"]),
        EmbeddingConfig(name="s_b", embedding_dim=8, num_embeddings=NUM_EMBEDDINGS,
                        feature_names=["qc"]),
    ]
    keys = ["qa", "qb", "qc"]
    what = f"sequence[{router}]"
    sharded = DynamicEmbeddingCollection(configs, fused_params=SGD, device=device,
                                         pg=dist.group.WORLD, router=router)
    reference = DynamicEmbeddingCollection(configs, fused_params=SGD, device=device)
    for step in range(3):
        note(f"{what} step {step}")
        batches = draw_batches(seed + 1, step, world, keys, False, empty_rank)
        out = sharded(batches[rank].kjt(device))
        ref = reference(concatenated(batches, device))
        loss, ref_loss = 0.0, 0.0
        for f in keys:
            before = sum(int(b.values[f].numel()) for b in batches[:rank])
            n = out[f].values().shape[0]
            want = ref[f].values()[before:before + n]
            # float32: the owners sum a key's gradients from several ranks in another order.
            torch.testing.assert_close(out[f].values().double(), want.detach().double(),
                                       rtol=1e-5, atol=1e-6,
                                       msg=lambda m: f"{what} step {step} {f}: {m}")
            gen = torch.Generator().manual_seed(seed + 11 * step + len(f))
            ups = torch.randn(ref[f].values().shape, generator=gen).to(device)
            loss = loss + (out[f].values() * ups[before:before + n]).sum()
            ref_loss = ref_loss + (ref[f].values() * ups).sum()
        loss.backward()
        ref_loss.backward()
    for t in ("s_a", "s_b"):
        assert_same_rows(sharded, reference, t, what)


def run_mismatch(device):
    """Ranks given different dims, then a configuration only one rank refuses: every rank
    raises, naming the rank(s), instead of waiting."""
    rank, world = dist.get_rank(), dist.get_world_size()
    if world > 1:
        dim = 16 if rank == world - 1 else 8
        configs = [EmbeddingBagConfig(name="m", embedding_dim=dim, num_embeddings=100,
                                      feature_names=["m"])]
        try:
            DynamicEmbeddingBagCollection(configs, fused_params=SGD, device=device,
                                          pg=dist.group.WORLD)
        except dynemb.InvalidArgument as e:
            assert "rank" in str(e) and "16" in str(e), str(e)
        else:
            raise AssertionError(f"rank {rank}: tables with dims 8 / 16 on different ranks were "
                                 "accepted")
    bad = 0 if rank == 0 else 8
    configs = [EmbeddingBagConfig(name="m", embedding_dim=bad, num_embeddings=100,
                                  feature_names=["m"])]
    try:
        DynamicEmbeddingBagCollection(configs, fused_params=SGD, device=device,
                                      pg=dist.group.WORLD)
    except dynemb.InvalidArgument as e:
        assert "embedding_dim = 0" in str(e) and (rank == 0 or "rank(s) 0" in str(e)), str(e)
    else:
        raise AssertionError(f"rank {rank}: a table refused on rank 0 was built here")


def run(rank, world, port, seed, device_type, master="127.0.0.1"):
    """One rank: joins the group (tcp on `port`, or env:// when port is 0) and runs every case."""
    print(f"[SEED] sharded rank {rank}/{world} DYNEMB_TEST_SEED={seed}", flush=True)
    timeout = datetime.timedelta(seconds=120)
    if port:
        # Loopback only: gloo would otherwise pick the interface the host name resolves to.
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        dist.init_process_group("gloo", init_method=f"tcp://{master}:{port}", rank=rank,
                                world_size=world, timeout=timeout)
    else:
        dist.init_process_group("gloo", init_method="env://", timeout=timeout)
    if device_type == "cuda":
        local = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
    empty_rank = world - 1
    torch.manual_seed(seed)
    note(f"mismatch on {device}")
    run_mismatch(device)
    # One checkpoint directory every rank sees (rank 0 makes it).
    holder = [tempfile.mkdtemp(prefix="dynemb-sharded-") if rank == 0 else None]
    dist.broadcast_object_list(holder, src=0)
    run_bags(seed, device, "rows", "hash", False, ADAM, empty_rank, bad_batch_step=2,
             checkpoint_dir=os.path.join(holder[0], "ckpt"))
    run_bags(seed + 3, device, "pooled_on_owner", "modulo", True, ROWWISE, empty_rank,
             bad_batch_step=-1)
    run_bags(seed + 5, device, "pooled_on_owner", "hash", False, ADAM, 0, bad_batch_step=1)
    run_sequence(seed, device, "hash", empty_rank)
    dist.barrier()
    if rank == 0:
        shutil.rmtree(holder[0], ignore_errors=True)
    print(f"PASS sharded rank {rank}/{world} on {device} (seed {seed})", flush=True)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--seed", type=lambda s: int(s, 0),
                        default=int(os.environ.get("DYNEMB_TEST_SEED", "0"), 0) or 12345)
    args = parser.parse_args()
    run(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), 0, args.seed, args.device)


if __name__ == "__main__":
    sys.exit(main())
