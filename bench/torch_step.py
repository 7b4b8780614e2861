#!/usr/bin/env python3
"""One process, one run: a training step of dynemb's PyTorch front end against PyTorch's own
sparse embeddings (nn.EmbeddingBag(mode="sum", sparse=True) + torch.optim.SparseAdam) on the
same batches, and (given the program) the C++ `dynemb bench train` on the same shape.

Shape (ANCHORS.md): 10 tables x 2^20 ids x dim 128, batch 65,536 bags x 20 ids, Zipf 1.05,
Adam lr 1e-3, SUM pooling. --smoke: a tiny shape that runs on a CPU in seconds.
The Python module runs twice: grouped (group_tables=True, one C++ EmbeddingCollection) against
`bench train --grouped-tables`, and with a compiled table per table against
`--sequential-tables`. For the grouped module it also gives the host time of its Python work
with the compiled calls made no-ops, and the binding floor: the compiled collection called
directly with everything prepared (what the module, autograd and the gradient concatenation
add comes out as the difference).
Prints a table and writes JSON (machine, GPU, commit, date, every parameter, every figure).

  PYTHONPATH=build/python python3 bench/torch_step.py --device cuda \\
      --dynemb-program build/tools/dynemb/dynemb --json bench/results/torch-step-cuda-h100.json
  PYTHONPATH=build/python /usr/bin/python3 bench/torch_step.py --smoke --device cpu
"""

import argparse
import datetime
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch
from torch import nn

import dynemb
from dynemb.torch import DynamicEmbeddingBagCollection, EmbeddingBagConfig, KeyedJaggedTensor


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--tables", type=int, default=10)
    p.add_argument("--rows", type=int, default=1 << 20, help="ids per table (Zipf over them)")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--batch", type=int, default=65536)
    p.add_argument("--ids-per-bag", type=int, default=20)
    p.add_argument("--alpha", type=float, default=1.05)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch-sets", type=int, default=4, help="distinct batches cycled through")
    p.add_argument("--seed", type=int, default=0, help="0 = random")
    p.add_argument("--smoke", action="store_true", help="a tiny shape (CPU smoke test)")
    p.add_argument("--skip-torch", action="store_true", help="skip the PyTorch peer")
    p.add_argument("--profile", action="store_true",
                   help="print torch.profiler's table of three Python steps (stderr)")
    p.add_argument("--only-grouped", action="store_true",
                   help="only the grouped Python module and the grouped C++ collection")
    p.add_argument("--only-separate", action="store_true",
                   help="only the Python module with a table per table and the sequential C++ tables")
    p.add_argument("--dynemb-program", default="", help="the dynemb program: also run `bench train`")
    p.add_argument("--json", default="", help="result file (default: bench/results/torch-step-<device>-<machine>.json, "
                   "<machine> = $DYNEMB_BENCH_MACHINE or the host name; a new run replaces it)")
    a = p.parse_args()
    if a.smoke:
        a.tables, a.rows, a.dim, a.batch, a.ids_per_bag = 2, 10000, 16, 256, 5
        a.steps, a.warmup = 3, 1
    return a


class Timer:
    """Seconds of a callable: CUDA events on the current stream, or the host clock."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __call__(self, fn):
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t = time.perf_counter()
        fn()
        return time.perf_counter() - t


def zipf_batches(a, device, generator):
    """batch_sets x tables id tensors [batch * ids_per_bag] with P(k) ~ 1 / (k + 1)^alpha."""
    k = torch.arange(1, a.rows + 1, dtype=torch.float64)
    cdf = torch.cumsum(k.pow(-a.alpha), 0)
    cdf /= cdf[-1].clone()
    cdf = cdf.to(device)
    n = a.batch * a.ids_per_bag
    sets = []
    for _ in range(a.batch_sets):
        tables = []
        for _ in range(a.tables):
            u = torch.rand(n, dtype=torch.float64, generator=generator).to(device)
            tables.append(torch.searchsorted(cdf, u).clamp_(max=a.rows - 1).to(torch.int64))
        sets.append(tables)
    return sets


def median_ms(times):
    return statistics.median(times) * 1e3


def run_dynemb(a, device, sets, grads, timer, group_tables):
    configs = [EmbeddingBagConfig(name=f"t{t}", embedding_dim=a.dim, num_embeddings=a.rows,
                                  feature_names=[f"f{t}"]) for t in range(a.tables)]
    capacity = 128
    while capacity < 2 * a.rows:
        capacity *= 2  # load factor <= 0.5 with every id stored (as `dynemb bench train`)
    opts = dynemb.DynamicEmbTableOptions(
        max_capacity=capacity, score_strategy=dynemb.DynamicEmbScoreStrategy.STEP,
        safe_check_mode=dynemb.DynamicEmbCheckMode.WARNING)
    ebc = DynamicEmbeddingBagCollection(
        configs, table_options=opts, device=device, group_tables=group_tables,
        fused_params={"optimizer": dynemb.EmbOptimType.ADAM, "learning_rate": a.lr})
    if group_tables:
        # The host-sync-free step `bench train --grouped-tables` times, its ids below a.rows.
        ebc.set_host_sync_free(True, key_bits=max(1, (a.rows - 1).bit_length()))
    lengths = torch.full((a.tables * a.batch,), a.ids_per_bag, dtype=torch.int64, device=device)
    kjts = [KeyedJaggedTensor([f"f{t}" for t in range(a.tables)], torch.cat(s), lengths=lengths)
            for s in sets]
    for kjt in kjts:
        kjt.offset_per_key()  # the per-key id counts, read once per batch (as TorchRec keeps them)
    keys = [f"f{t}" for t in range(a.tables)]

    # Each table's gradient a slice of one buffer, table after table (what `bench train
    # --grouped-tables` hands its collection, and what autograd gives for a loss over the
    # outputs concatenated); separate: one buffer per table (what --sequential-tables uses).
    one_buffer = list(torch.cat(grads).split(a.batch))

    def step(i, grads=one_buffer):
        kt = ebc(kjts[i % len(kjts)])
        d = kt.to_dict()
        torch.autograd.backward([d[k] for k in keys], grads)

    def forward(i):
        with torch.no_grad():
            ebc(kjts[i % len(kjts)])

    for i in range(a.warmup):
        step(i)
    steps = [timer(lambda i=i: step(i)) for i in range(a.steps)]
    separate = [timer(lambda i=i: step(i, grads)) for i in range(a.steps)]
    fwd = [timer(lambda i=i: forward(i)) for i in range(a.steps)]
    # Host seconds of the module's Python work in a step, the device idle: the forward's and
    # the backward's calls into the compiled module replaced by no-ops (what the bindings add
    # beyond the C++ step on the host, with every Python-level op it issues).
    host = host_overhead(ebc, kjts, keys, one_buffer, device)
    stats = ebc.table_stats()
    result = {"step_ms_median": median_ms(steps), "forward_ms_median": median_ms(fwd),
              "step_ms_all": [s * 1e3 for s in steps],
              "step_separate_gradients_ms_median": median_ms(separate),
              "host_python_step_ms_median": host * 1e3,
              "rows_after": sum(s["size"] for s in stats.values()),
              "refused": sum(s["refused"] for s in stats.values()),
              "evictions": sum(s["evictions"] for s in stats.values())}
    if group_tables:
        result["binding_floor"] = binding_floor(a, ebc, kjts, grads, timer)
    if a.profile:
        profile_steps(step, device)
    return result


def profile_steps(step, device, steps=3):
    """Prints torch.profiler's table of a few steps (host and device time per op and kernel):
    what the Python step runs beyond the compiled one."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        for i in range(steps):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize()
    key = "self_cuda_time_total" if device.type == "cuda" else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=key, row_limit=25), file=sys.stderr)


class _NoCompiledCalls:
    """Every compiled handle's forward / forward_packed / backward made a no-op returning a
    fake training forward number, for host_overhead."""

    def __init__(self, ebc):
        self.handles = []
        for t in ebc._tables:
            h = t.group.handle if t.group is not None else t.handle
            if all(h is not x for x in self.handles):
                self.handles.append(h)

    def __enter__(self):
        self.saved = []
        for h in self.handles:
            cls = type(h)
            for name in ("forward", "forward_packed", "backward"):
                if hasattr(cls, name):
                    self.saved.append((cls, name, getattr(cls, name)))
        for cls, name, _ in self.saved:
            setattr(cls, name, (lambda *args, **kw: 1))
        return self

    def __exit__(self, *exc):
        for cls, name, fn in self.saved:
            setattr(cls, name, fn)


def host_overhead(ebc, kjts, keys, grads, device, repeats=20):
    """Median host seconds of a step's Python work with the compiled calls made no-ops (the
    torch ops the module issues still run; synchronized before each)."""
    times = []
    with _NoCompiledCalls(ebc):
        for i in range(repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            t = time.perf_counter()
            kt = ebc(kjts[i % len(kjts)])
            d = kt.to_dict()
            torch.autograd.backward([d[k] for k in keys], grads)
            times.append(time.perf_counter() - t)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return statistics.median(times)


def binding_floor(a, ebc, kjts, grads, timer):
    """The grouped step through the compiled module alone (EmbeddingCollection.forward_packed
    and backward with the offsets rebased, the output and the gradient (one buffer) made
    before timing): what a step costs without the Python module, autograd and the gradient
    concatenation."""
    group = ebc._groups[0]
    handle, device = group.handle, ebc.device
    if len(ebc._groups) != 1:
        return {"error": f"{len(ebc._groups)} groups"}
    prepared = []
    for kjt in kjts:
        batch = ebc._batch(kjt, False)
        plan = ebc._plan(batch.keys, batch.stride)
        rebased = batch.offsets.index_select(0, plan.gather).sub_(
            batch.offsets.index_select(0, plan.base))
        starts = batch.starts
        id_ranges = [x for t in range(a.tables) for x in (starts[t], starts[t + 1])]
        prepared.append((batch.values, rebased, id_ranges))
    out = torch.empty((a.tables * a.batch, a.dim), dtype=torch.float32, device=device)
    grad = torch.cat(grads)
    bags = [a.batch] * a.tables
    stream = ebc._stream()

    def step(i, backward=True):
        values, rebased, id_ranges = prepared[i % len(prepared)]
        n = handle.forward_packed(values, rebased, None, id_ranges, bags, dynemb._C.PoolingMode.SUM,
                                  True, out, stream)
        if backward:
            handle.backward(grad, n, stream)

    for i in range(a.warmup):
        step(i)
    steps = [timer(lambda i=i: step(i)) for i in range(a.steps)]
    return {"step_ms_median": median_ms(steps), "step_ms_all": [s * 1e3 for s in steps]}


def run_torch(a, device, sets, grads, timer):
    bags = nn.ModuleList([nn.EmbeddingBag(a.rows, a.dim, mode="sum", sparse=True)
                          for _ in range(a.tables)]).to(device)
    opt = torch.optim.SparseAdam(bags.parameters(), lr=a.lr)

    def step(i):
        s = sets[i % len(sets)]
        opt.zero_grad(set_to_none=True)
        outs = [bags[t](s[t].view(a.batch, a.ids_per_bag)) for t in range(a.tables)]
        torch.autograd.backward(outs, grads)
        opt.step()

    def forward(i):
        s = sets[i % len(sets)]
        with torch.no_grad():
            for t in range(a.tables):
                bags[t](s[t].view(a.batch, a.ids_per_bag))

    for i in range(a.warmup):
        step(i)
    steps = [timer(lambda i=i: step(i)) for i in range(a.steps)]
    fwd = [timer(lambda i=i: forward(i)) for i in range(a.steps)]
    result = {"step_ms_median": median_ms(steps), "forward_ms_median": median_ms(fwd),
              "step_ms_all": [s * 1e3 for s in steps]}
    del opt, bags
    return result


def run_cpp(a, device, program, variant):
    backend = "cuda" if device.type == "cuda" else "cpu"
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "train.json")
        cmd = [program, "bench", "train", "--backend", backend, "--tables", str(a.tables),
               "--rows", str(a.rows), "--dim", str(a.dim), "--batch", str(a.batch),
               "--ids-per-bag", str(a.ids_per_bag), "--alpha", str(a.alpha), "--steps",
               str(a.steps), "--warmup", str(a.warmup), "--optimizer", "adam", "--json", path]
        if variant:
            cmd.append(variant)
        run = subprocess.run(cmd, capture_output=True, text=True)
        if run.returncode != 0:
            return {"command": " ".join(cmd), "error": run.stderr[-2000:]}
        with open(path) as f:
            j = json.load(f)
        r = j["results"]
        return {"command": " ".join(cmd), "step_ms_median": r["step_ms_median"],
                "forward_ms_median": r["forward_ms_median"], "git_commit": j.get("git_commit")}


def git_commit():
    env = os.environ.get("DYNEMB_GIT_COMMIT")
    if env:
        return env
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, cwd=os.path.dirname(os.path.abspath(__file__))).stdout.strip()
    except OSError:
        return ""


def main():
    a = parse_args()
    device = torch.device(a.device)
    seed = a.seed or int.from_bytes(os.urandom(4), "little") or 1
    print(f"seed {seed}", file=sys.stderr)
    generator = torch.Generator().manual_seed(seed)
    sets = zipf_batches(a, device, generator)
    grads = [torch.randn(a.batch, a.dim, generator=generator).to(device) for _ in range(a.tables)]
    timer = Timer(device)
    results = {}
    # Grouped first (the figure of record), then one compiled table per table.
    for name, grouped in (("dynemb_python_grouped", True), ("dynemb_python", False)):
        if (a.only_grouped and not grouped) or (a.only_separate and grouped):
            continue
        results[name] = run_dynemb(a, device, sets, grads, timer, grouped)
        gc.collect()
        if device.type == "cuda":
            torch.cuda.empty_cache()
    if not a.skip_torch:
        results["torch_sparse_adam"] = run_torch(a, device, sets, grads, timer)
    if a.dynemb_program:
        if not a.only_separate:
            results["dynemb_cpp_grouped"] = run_cpp(a, device, a.dynemb_program, "--grouped-tables")
        if not a.only_grouped:
            results["dynemb_cpp_sequential"] = run_cpp(a, device, a.dynemb_program,
                                                       "--sequential-tables")
    py = results.get("dynemb_python_grouped") or results["dynemb_python"]
    ratios = {}
    if "torch_sparse_adam" in results:
        t = results["torch_sparse_adam"]
        ratios["torch_step_over_dynemb_step"] = t["step_ms_median"] / py["step_ms_median"]
        ratios["dynemb_forward_over_torch_forward"] = py["forward_ms_median"] / t["forward_ms_median"]
    # Like with like: the grouped Python module against the C++ collection, one compiled
    # table per table against the C++ tables one after the other.
    for py_name, cpp_name, ratio in (
            ("dynemb_python_grouped", "dynemb_cpp_grouped", "python_grouped_step_over_cpp_grouped_step"),
            ("dynemb_python", "dynemb_cpp_sequential", "python_step_over_cpp_sequential_step")):
        p, c = results.get(py_name, {}), results.get(cpp_name, {})
        if "step_ms_median" in p and "step_ms_median" in c:
            ratios[ratio] = p["step_ms_median"] / c["step_ms_median"]
    floor = py.get("binding_floor", {})
    cpp = results.get("dynemb_cpp_grouped", {})
    if "step_ms_median" in floor and "step_ms_median" in cpp:
        ratios["binding_floor_step_over_cpp_grouped_step"] = floor["step_ms_median"] / cpp["step_ms_median"]

    print(f"\ntorch_step ({device}, {a.tables} tables x {a.rows} ids x dim {a.dim}, batch "
          f"{a.batch} x {a.ids_per_bag}, Zipf {a.alpha}, Adam lr {a.lr})")
    print(f"{'run':32s} {'step ms':>10s} {'forward ms':>11s}")
    for name, r in results.items():
        if "step_ms_median" in r:
            print(f"{name:32s} {r['step_ms_median']:10.3f} {r['forward_ms_median']:11.3f}")
            if "step_separate_gradients_ms_median" in r:
                print(f"{'  gradients in separate buffers':32s} {r['step_separate_gradients_ms_median']:10.3f}")
            if "host_python_step_ms_median" in r:
                print(f"{'  host Python work (no device)':32s} {r['host_python_step_ms_median']:10.3f}")
            floor = r.get("binding_floor", {})
            if "step_ms_median" in floor:
                print(f"{'  binding floor (no module)':32s} {floor['step_ms_median']:10.3f}")
        else:
            print(f"{name:32s} failed: {r.get('error', '')[:200]}")
    for k, v in ratios.items():
        print(f"{k}: {v:.3f}")

    gpu = None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        gpu = {"name": props.name, "memory_bytes": props.total_memory,
               "capability": f"{props.major}.{props.minor}"}
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    report = {
        "benchmark": "torch_step",
        "machine": {"hostname": socket.gethostname(), "cpu": platform.processor() or platform.machine(),
                    "cores": os.cpu_count()},
        "gpu": gpu,
        "git_commit": git_commit(),
        "date_utc": now,
        "software": {"python": platform.python_version(), "torch": torch.__version__},
        "parameters": {"device": str(device), "tables": a.tables, "rows_per_table": a.rows,
                       "dim": a.dim, "batch": a.batch, "ids_per_bag": a.ids_per_bag,
                       "zipf_alpha": a.alpha, "optimizer": "adam", "learning_rate": a.lr,
                       "steps": a.steps, "warmup_steps": a.warmup, "batch_sets": a.batch_sets,
                       "seed": seed, "pooling": "sum", "score_strategy": "step",
                       "timing": "median; CUDA events on the current stream" if gpu else "median; host clock",
                       "torch_peer": "nn.EmbeddingBag(mode='sum', sparse=True) x tables + SparseAdam",
                       "forward": "under torch.no_grad(), module in train mode (dynemb inserts)",
                       "python_modules": "dynemb_python_grouped: group_tables=True (one C++ "
                                         "EmbeddingCollection) with set_host_sync_free(key_bits "
                                         "of the ids), against dynemb_cpp_grouped (host-sync-"
                                         "free too); "
                                         "dynemb_python: a compiled table per table, against "
                                         "dynemb_cpp_sequential",
                       "python_batches": "KeyedJaggedTensor made once per batch set, its "
                                         "offset_per_key() read before timing",
                       "python_gradients": "step_ms: each table's gradient a slice of one buffer, "
                                           "table after table (as bench train --grouped-tables); "
                                           "step_separate_gradients_ms: one buffer per table"},
        "results": results,
        "ratios": ratios,
    }
    path = a.json or os.path.join(os.path.dirname(os.path.abspath(__file__)), "results",
                                  f"torch-step-{device.type}-{os.environ.get('DYNEMB_BENCH_MACHINE') or socket.gethostname()}.json")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(report, f, indent=2)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
