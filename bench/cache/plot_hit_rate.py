#!/usr/bin/env python3
"""Plots the hit rate against capacity from a `dynemb bench cache` result file to a PNG.

usage: python3 bench/cache/plot_hit_rate.py RESULT.json [OUT.png]
"""
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main() -> None:
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else path.rsplit(".", 1)[0] + "-hit-rate.png"
    with open(path) as f:
        result = json.load(f)
    if "curve" not in result:
        sys.exit(f"{path}: no hit-rate curve (run without --no-curve)")
    points = result["curve"]["points"]
    rows = [p["cache_rows"] for p in points]
    params = result["params"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(rows, [p["draw_hit_rate"] for p in points], "o-", label="dynemb, per draw")
    ax.plot(rows, [p["distinct_hit_rate"] for p in points], "s-", label="dynemb, per distinct key")
    ax.plot(rows, [p["ideal_draw_hit_rate"] for p in points], "k--",
            label="ideal (the most frequent ids), per draw")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1)
    ax.set_xlabel("cache rows (bytes of HugeCTR's cache of that many rows)")
    ax.set_ylabel("hit rate")
    gpu = result.get("gpu") or {}
    ax.set_title(f"power law alpha {params['alpha']} over {params['ids']:,} ids, "
                 f"{params['backend']} {gpu.get('name', '')}".strip(), fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.text(0.01, 0.01, f"commit {result['commit']}, {result['date']}", fontsize=7)
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    print(out)


if __name__ == "__main__":
    main()
