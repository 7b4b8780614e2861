#!/usr/bin/env python3
"""Writes the small CTR files the trainer's end-to-end tests read (tests/train).

Labels come from a hidden logistic model over the features, so a trainer that learns reaches
an AUC well above 0.5. Deterministic: rerunning gives the same bytes.
Usage: python3 tests/data/make_train_data.py  (writes next to this script)
"""
import math
import os
import random

HERE = os.path.dirname(os.path.abspath(__file__))


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def write_libsvm(path, lines, rng):
    weights = [rng.gauss(0, 1.0) for _ in range(60)]
    with open(path, "w") as f:
        for _ in range(lines):
            feats = sorted(rng.sample(range(60), 8))
            z = sum(weights[i] for i in feats) - 0.5
            label = 1 if rng.random() < sigmoid(z) else -1
            f.write(str(label) + " " + " ".join(f"{i}:1" for i in feats) + "\n")


def write_libffm(path, lines, rng):
    fields, per_field = 6, 12
    weights = [[rng.gauss(0, 1.0) for _ in range(per_field)] for _ in range(fields)]
    with open(path, "w") as f:
        for _ in range(lines):
            picks = [rng.randrange(per_field) for _ in range(fields)]
            z = sum(weights[fi][p] for fi, p in enumerate(picks)) - 0.3
            label = 1 if rng.random() < sigmoid(z) else 0
            f.write(str(label) + " " + " ".join(f"{fi}:{fi * 100 + p}:1" for fi, p in enumerate(picks)) + "\n")


def write_criteo(path, lines, rng):
    vocab = [[f"{rng.getrandbits(32):08x}" for _ in range(rng.choice([3, 10, 30]))] for _ in range(26)]
    weights = [[rng.gauss(0, 0.8) for _ in v] for v in vocab]
    int_weight = [rng.gauss(0, 0.3) for _ in range(13)]
    with open(path, "w") as f:
        for _ in range(lines):
            ints, z = [], -1.0
            for c in range(13):
                if rng.random() < 0.1:
                    ints.append("")
                    continue
                v = int(rng.expovariate(0.2))
                ints.append(str(v))
                z += int_weight[c] * math.log1p(v)
            cats = []
            for c in range(26):
                if rng.random() < 0.05:
                    cats.append("")
                    continue
                k = min(int(rng.paretovariate(1.2)) - 1, len(vocab[c]) - 1)
                cats.append(vocab[c][k])
                z += weights[c][k]
            label = 1 if rng.random() < sigmoid(z / 2) else 0
            f.write("\t".join([str(label)] + ints + cats) + "\n")


if __name__ == "__main__":
    write_libsvm(os.path.join(HERE, "train_small.libsvm"), 2000, random.Random(11))
    write_libffm(os.path.join(HERE, "train_small.libffm"), 1500, random.Random(12))
    write_criteo(os.path.join(HERE, "train_small_criteo.tsv"), 1000, random.Random(13))
