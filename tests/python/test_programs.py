"""The example and the benchmark run end to end (tiny shapes): they cannot rot unnoticed."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dynemb

ROOT = Path(__file__).resolve().parents[2]


def run(args, tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(dynemb.__file__).resolve().parents[1])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)


def test_train_ctr_example_trains_and_checkpoints(tmp_path):
    r = run([str(ROOT / "examples/python/train_ctr.py"), "--steps", "20", "--batch", "128",
             "--vocab", "500", "--eval-batches", "4", "--checkpoint-dir", str(tmp_path / "ck")],
            tmp_path)
    assert r.returncode == 0, r.stderr
    assert "held-out AUC" in r.stdout
    auc = float(r.stdout.split("held-out AUC")[1].split()[0])
    assert 0.5 < auc <= 1.0
    assert dynemb._C.inspect(str(tmp_path / "ck" / "embeddings"))["verified"]


def test_torch_step_benchmark_smoke(tmp_path):
    out = tmp_path / "torch_step.json"
    r = run([str(ROOT / "bench/torch_step.py"), "--smoke", "--device", "cpu", "--json", str(out)],
            tmp_path)
    assert r.returncode == 0, r.stderr
    report = json.loads(out.read_text())
    for key in ("machine", "git_commit", "date_utc", "parameters", "results"):
        assert key in report
    assert report["results"]["dynemb_python"]["step_ms_median"] > 0
    assert report["results"]["torch_sparse_adam"]["step_ms_median"] > 0
