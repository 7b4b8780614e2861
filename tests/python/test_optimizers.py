"""Each fused optimizer against torch.optim (SGD, Adagrad: their sparse twins) or its
published rule in float64 (Adam with a per-row step count, row-wise AdaGrad, RMSProp, FTRL),
over many steps with repeated ids; with weight decay and clipping."""

import math

import pytest
import torch
from torch import nn

import dynemb
from dynemb.torch import DynamicEmbeddingBag

from conftest import DEVICES, rows_of, zipf_ids

UNIVERSE, DIM, BATCH, BAG, STEPS = 64, 8, 16, 6, 12


class RowRule:
    """The published rule of one optimizer, applied in float64 to the rows a step touched."""

    def __init__(self, name, p):
        self.name, self.p = name, p
        self.state = {}

    def step(self, w: torch.Tensor, grad: torch.Tensor, touched):
        p = self.p
        lr, eps = p["learning_rate"], p.get("eps", 1e-8)
        for r in touched:
            g = grad[r].clone()
            if p.get("max_norm", 0) > 0:
                norm = float(g.norm())
                if norm > p["max_norm"]:
                    g = g * (p["max_norm"] / norm)
            g = g + p.get("weight_decay", 0.0) * w[r]
            if p.get("gradient_clipping"):
                g = g.clamp(-p["max_gradient"], p["max_gradient"])
            st = self.state.setdefault(r, {})
            if self.name == "sgd":
                w[r] -= lr * g
            elif self.name == "adam":
                b1, b2 = p.get("beta1", 0.9), p.get("beta2", 0.999)
                t = st["t"] = st.get("t", 0) + 1
                m = st["m"] = b1 * st.get("m", torch.zeros_like(g)) + (1 - b1) * g
                v = st["v"] = b2 * st.get("v", torch.zeros_like(g)) + (1 - b2) * g * g
                w[r] -= lr * (m / (1 - b1 ** t)) / ((v / (1 - b2 ** t)).sqrt() + eps)
            elif self.name == "exact_adagrad":
                a = st["a"] = st.get("a", torch.zeros_like(g)) + g * g
                w[r] -= lr * g / ((a + p.get("initial_accumulator_value", 0.0)).sqrt() + eps)
            elif self.name == "exact_row_wise_adagrad":
                a = st["a"] = st.get("a", 0.0) + float((g * g).mean())
                w[r] -= lr * g / (math.sqrt(a + p.get("initial_accumulator_value", 0.0)) + eps)
            elif self.name == "rmsprop":
                rho = p.get("rho", 0.99)
                v = st["v"] = rho * st.get("v", torch.zeros_like(g)) + (1 - rho) * g * g
                w[r] -= lr * g / (v.sqrt() + eps)
            elif self.name == "ftrl":
                l1, l2, beta = p.get("l1_reg", 0.0), p.get("l2_reg", 0.0), p.get("ftrl_beta", 0.0)
                n0 = st.get("n", torch.full_like(g, p.get("initial_accumulator_value", 0.0)))
                z = st.get("z", torch.zeros_like(g))
                n1 = n0 + g * g
                z = z + g - (n1.sqrt() - n0.sqrt()) / lr * w[r]
                st["n"], st["z"] = n1, z
                new = -(z - torch.sign(z) * l1) / ((beta + n1.sqrt()) / lr + l2)
                w[r] = torch.where(z.abs() <= l1, torch.zeros_like(new), new)


def batches(steps, device):
    out = []
    for _ in range(steps):
        ids = zipf_ids(BATCH * BAG, UNIVERSE).view(BATCH, BAG)
        out.append((ids.to(device), torch.randn(BATCH, DIM, dtype=torch.float64)))
    return out


def seeded_module(params, device):
    m = DynamicEmbeddingBag(UNIVERSE, DIM, fused_params=params, device=device)
    init = torch.randn(UNIVERSE, DIM) * 0.1
    m.dynemb_tables()["table"].insert_or_assign(
        torch.arange(UNIVERSE, device=device), init.to(device),
        torch.cuda.current_stream().cuda_stream if device == "cuda" else 0)
    return m, init


def run_dynemb(m, data):
    for ids, up in data:
        out = m(ids)
        (out * up.to(out.device, torch.float32)).sum().backward()
    return rows_of(m, torch.arange(UNIVERSE, device=m.device)).cpu().double()


CASES = [
    ("sgd", {"learning_rate": 0.05}),
    ("sgd", {"learning_rate": 0.05, "weight_decay": 0.1, "gradient_clipping": True,
             "max_gradient": 0.5}),
    ("adam", {"learning_rate": 0.01}),
    ("adam", {"learning_rate": 0.01, "beta1": 0.8, "beta2": 0.99, "eps": 1e-6,
              "weight_decay": 0.01, "max_norm": 1.0}),
    ("exact_adagrad", {"learning_rate": 0.1, "initial_accumulator_value": 0.1}),
    ("exact_row_wise_adagrad", {"learning_rate": 0.1}),
    ("rmsprop", {"learning_rate": 0.01, "rho": 0.9}),
    ("ftrl", {"learning_rate": 0.1, "l1_reg": 0.01, "l2_reg": 0.01, "ftrl_beta": 1.0}),
]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name,params", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_optimizer_matches_published_rule(seed, device, name, params):
    fused = dict(params, optimizer=name)
    m, init = seeded_module(fused, device)
    data = batches(STEPS, device)
    got = run_dynemb(m, data)
    w = init.double().clone()
    rule = RowRule(name, params)
    for ids, up in data:
        ref = nn.EmbeddingBag(UNIVERSE, DIM, mode="sum").double()
        with torch.no_grad():
            ref.weight.copy_(w)
        (ref(ids.cpu()) * up).sum().backward()
        with torch.no_grad():
            rule.step(w, ref.weight.grad, torch.unique(ids.cpu()).tolist())
    torch.testing.assert_close(got, w, rtol=2e-4, atol=2e-5)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", ["sgd", "adagrad"])
def test_optimizer_matches_torch_optim(seed, device, name):
    lr = 0.05
    fused = {"optimizer": "sgd" if name == "sgd" else "exact_adagrad", "learning_rate": lr,
             "eps": 1e-10}
    m, init = seeded_module(fused, device)
    data = batches(STEPS, device)
    got = run_dynemb(m, data)
    ref = nn.EmbeddingBag(UNIVERSE, DIM, mode="sum", sparse=True).double()
    with torch.no_grad():
        ref.weight.copy_(init.double())
    opt = (torch.optim.SGD(ref.parameters(), lr=lr) if name == "sgd"
           else torch.optim.Adagrad(ref.parameters(), lr=lr, eps=1e-10))
    for ids, up in data:
        opt.zero_grad()
        (ref(ids.cpu()) * up).sum().backward()
        opt.step()
    torch.testing.assert_close(got, ref.weight.detach(), rtol=2e-4, atol=2e-5)
