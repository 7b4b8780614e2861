#!/usr/bin/env bash
# Runs dynemb_bench_dist at 1, 2 and 3 MPI ranks on this machine (loopback), with each exchange
# (rows, pooled on owner), and merges the six JSON files into bench/results/dist-cpu-<machine>.json ($DYNEMB_BENCH_MACHINE or the host name). Extra arguments go to every run.
# Usage: bash bench/dist/run.sh [build dir] [-- bench arguments]
set -euo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
shift || true
[ "${1:-}" = "--" ] && shift
out_dir="$(mktemp -d)"
trap 'rm -rf "$out_dir"' EXIT
# Oversubscribed ranks (more than cores) yield while they wait instead of spinning.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader
export OMPI_MCA_mpi_yield_when_idle=1
for exchange in rows pooled_on_owner; do
  for ranks in 1 2 3; do
    timeout 900 mpirun --oversubscribe --allow-run-as-root -np "$ranks" \
      "$build/bench/dist/dynemb_bench_dist" --exchange "$exchange" \
      --json "$out_dir/$exchange-$ranks.json" "$@"
  done
done
result="bench/results/dist-cpu-${DYNEMB_BENCH_MACHINE:-$(hostname)}.json"  # replaces the current result
/usr/bin/python3 - "$out_dir" "$result" <<'PY'
import json, sys
d, out = sys.argv[1], sys.argv[2]
runs = [json.load(open(f"{d}/{e}-{n}.json"))
        for e in ("rows", "pooled_on_owner") for n in (1, 2, 3)]
json.dump({"benchmark": "dist", "runs": runs}, open(out, "w"), indent=2)
print("wrote", out)
PY
