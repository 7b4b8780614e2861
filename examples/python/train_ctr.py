#!/usr/bin/env python3
"""A click-through-rate model in PyTorch whose embeddings live in dynemb.

26 categorical features (one id each, any 64-bit value) go through a DynamicEmbeddingBagCollection
(one dynamic table per feature, rows created on first sight, Adagrad fused into backward); 13
dense features and the embeddings go through a small MLP trained by torch.optim.Adam. Data: a
synthetic Criteo-like stream (Zipf ids whose hidden weights decide the click), or a Criteo TSV
(label, 13 integers, 26 hex categories per line). Prints a progress bar, the held-out AUC, and
writes a checkpoint (the tables with DynamicEmbDump, the dense part with torch.save).

  PYTHONPATH=build/python /usr/bin/python3 examples/python/train_ctr.py --steps 200
  PYTHONPATH=build/python python3 examples/python/train_ctr.py --device cuda --batch 8192
  PYTHONPATH=build/python /usr/bin/python3 examples/python/train_ctr.py --criteo tests/data/train_small_criteo.tsv
"""

import argparse
import os
import sys
import time

import torch
from torch import nn

import dynemb
from dynemb.torch import DynamicEmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor

NUM_DENSE, NUM_SPARSE = 13, 26
FEATURES = [f"C{i + 1}" for i in range(NUM_SPARSE)]


class SyntheticCriteo:
    """Batches of (dense [B, 13], ids [B, 26], labels [B]): feature f's ids are Zipf over
    `vocab` values scattered over the int64 range; the click probability is a logistic function
    of hidden per-id weights and of the dense features."""

    def __init__(self, vocab: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.g = g
        self.vocab = vocab
        k = torch.arange(1, vocab + 1, dtype=torch.float64)
        self.cdf = torch.cumsum(k.pow(-1.1), 0)
        self.cdf /= self.cdf[-1].clone()
        self.hidden = torch.randn(NUM_SPARSE, vocab, generator=g) * 0.6
        self.dense_w = torch.randn(NUM_DENSE, generator=g) * 0.3
        self.scatter = torch.randint(1, 2**62, (NUM_SPARSE,), generator=g)

    def batch(self, n: int):
        rank = torch.searchsorted(self.cdf, torch.rand(n, NUM_SPARSE, dtype=torch.float64,
                                                        generator=self.g)).clamp_(max=self.vocab - 1)
        dense = torch.randn(n, NUM_DENSE, generator=self.g)
        logit = self.hidden.gather(1, rank.t()).t().sum(1) / 2.0 + dense @ self.dense_w - 1.0
        labels = (torch.rand(n, generator=self.g) < torch.sigmoid(logit)).float()
        ids = rank * 1_000_003 + self.scatter  # large, feature-specific 64-bit ids
        return dense, ids, labels


def criteo_batches(path: str, n: int):
    """Batches from a Criteo TSV: log(1 + x) of the integers, the hex categories as ids."""
    dense, ids, labels = [], [], []
    with open(path) as f:
        for line in f:
            cols = line.rstrip("\n").split("\t")
            if len(cols) < 1 + NUM_DENSE + NUM_SPARSE:
                continue
            labels.append(float(cols[0]))
            dense.append([torch.log1p(torch.tensor(max(float(c or 0), 0.0))).item()
                          for c in cols[1:1 + NUM_DENSE]])
            ids.append([int(c, 16) if c else 0 for c in cols[1 + NUM_DENSE:1 + NUM_DENSE + NUM_SPARSE]])
            if len(labels) == n:
                yield torch.tensor(dense), torch.tensor(ids), torch.tensor(labels)
                dense, ids, labels = [], [], []
    if labels:
        yield torch.tensor(dense), torch.tensor(ids), torch.tensor(labels)


class CtrModel(nn.Module):
    def __init__(self, dim: int, capacity: int, device):
        super().__init__()
        configs = [EmbeddingBagConfig(name=f.lower(), embedding_dim=dim, num_embeddings=capacity,
                                      feature_names=[f]) for f in FEATURES]
        options = dynemb.DynamicEmbTableOptions(
            score_strategy=dynemb.DynamicEmbScoreStrategy.STEP,
            initializer_args=dynemb.DynamicEmbInitializerArgs(
                mode=dynemb.DynamicEmbInitializerMode.NORMAL, std_dev=0.01))
        self.sparse = DynamicEmbeddingBagCollection(
            configs, table_options=options, device=device,
            fused_params={"optimizer": dynemb.EmbOptimType.EXACT_ADAGRAD, "learning_rate": 0.05})
        self.mlp = nn.Sequential(nn.Linear(NUM_DENSE + NUM_SPARSE * dim, 128), nn.ReLU(),
                                 nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1)).to(device)

    def forward(self, dense, features):
        kt = self.sparse(features)
        return self.mlp(torch.cat([dense, kt.values()], dim=1)).squeeze(1)


def to_kjt(ids: torch.Tensor, device) -> KeyedJaggedTensor:
    b = ids.shape[0]
    return KeyedJaggedTensor(FEATURES, ids.t().contiguous().view(-1).to(device),
                             lengths=torch.ones(NUM_SPARSE * b, dtype=torch.int64, device=device))


def auc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """Area under the ROC curve (rank statistic, ties averaged)."""
    order = torch.argsort(scores)
    s, y = scores[order], labels[order]
    ranks = torch.empty_like(s, dtype=torch.float64)
    ranks[:] = torch.arange(1, len(s) + 1, dtype=torch.float64)
    uniq, inverse, counts = torch.unique_consecutive(s, return_inverse=True, return_counts=True)
    if len(uniq) < len(s):
        sums = torch.zeros(len(uniq), dtype=torch.float64).index_add_(0, inverse, ranks)
        ranks = (sums / counts)[inverse]
    pos = float(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    return (float(ranks[y > 0.5].sum()) - pos * (pos + 1) / 2) / (pos * neg)


def progress(step: int, total: int, loss: float, start: float):
    width = 30
    done = int(width * step / total)
    rate = step / max(time.time() - start, 1e-9)
    sys.stderr.write(f"\r[{'#' * done}{'.' * (width - done)}] {step}/{total} "
                     f"loss {loss:.4f} {rate:.1f} steps/s")
    sys.stderr.flush()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--eval-batches", type=int, default=10)
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--vocab", type=int, default=20000, help="synthetic ids per feature")
    p.add_argument("--capacity", type=int, default=1 << 16, help="rows per table")
    p.add_argument("--criteo", default="", help="a Criteo TSV file instead of the synthetic stream")
    p.add_argument("--checkpoint-dir", default="ctr_checkpoint")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    model = CtrModel(a.dim, a.capacity, device)
    dense_opt = torch.optim.Adam(model.mlp.parameters(), lr=1e-3)
    loss_fn = nn.BCEWithLogitsLoss()

    if a.criteo:
        all_batches = list(criteo_batches(a.criteo, a.batch))
        held_out = max(1, len(all_batches) // 10)
        train, evaluation = all_batches[:-held_out], all_batches[-held_out:]
        train = [train[i % len(train)] for i in range(a.steps)] if train else []
    else:
        stream = SyntheticCriteo(a.vocab, a.seed)
        train = (stream.batch(a.batch) for _ in range(a.steps))
        evaluation = [stream.batch(a.batch) for _ in range(a.eval_batches)]

    model.train()
    start = time.time()
    step = 0
    for dense, ids, labels in train:
        logits = model(dense.to(device), to_kjt(ids, device))
        loss = loss_fn(logits, labels.to(device))
        dense_opt.zero_grad()
        loss.backward()  # the tables' Adagrad runs here; the MLP's Adam below
        dense_opt.step()
        step += 1
        if step % 10 == 0 or step == a.steps:
            progress(step, a.steps, float(loss), start)
    sys.stderr.write("\n")

    model.eval()
    scores, labels_all = [], []
    with torch.no_grad():
        for dense, ids, labels in evaluation:
            scores.append(torch.sigmoid(model(dense.to(device), to_kjt(ids, device))).cpu())
            labels_all.append(labels)
    scores, labels_all = torch.cat(scores).double(), torch.cat(labels_all)
    stats = model.sparse.table_stats()
    rows = sum(s["size"] for s in stats.values())
    print(f"trained {step} steps of {a.batch} in {time.time() - start:.1f} s; "
          f"{rows} embedding rows in {len(stats)} tables")
    print(f"held-out AUC {auc(scores, labels_all):.4f} over {len(labels_all)} samples")

    os.makedirs(a.checkpoint_dir, exist_ok=True)
    dynemb.DynamicEmbDump(os.path.join(a.checkpoint_dir, "embeddings"), model, optim=True)
    torch.save(model.mlp.state_dict(), os.path.join(a.checkpoint_dir, "dense.pt"))
    print(f"checkpoint: {a.checkpoint_dir}/embeddings (dynemb inspect reads it), "
          f"{a.checkpoint_dir}/dense.pt")


if __name__ == "__main__":
    main()
