#!/usr/bin/env bash
# The multi-GPU check (issue 32), a sibling of scripts/gpu_check.sh for machines with 2 or more
# GPUs: one process per GPU under mpirun, NCCL bootstrapped over MPI, NVLink multicast off.
#   1. the MPI test binary (dynemb_dist_mpi_tests) at 1, 2 (and 4 when there are 4) ranks: its
#      NCCL suites train sharded collections against one GPU on the whole stream, with an empty
#      batch on one rank and mismatches failing on every rank;
#   2. the weak-scaling benchmark: dynemb_bench_dist --backend cuda --shape 13m (13.1M lookups
#      per GPU and step) at 1, 2 (, 4) GPUs, each with NCCL's all-to-all bandwidth measured in the
#      same run, merged into results/dist-cuda-<machine>.json;
#   3. every executable script in scripts/gpu_check_multi.d/ (other parts' multi-GPU runs), with
#      the build directory as its argument.
# Logs go to $OUT (else gpu_check_out/), results to its results/ folder under bench/results/'s
# stable names.
#
# Usage: bash scripts/gpu_check_multi.sh [BUILD_DIR]   (default build-gpu; built here when absent)
#   env: GPU_CHECK_MACHINE=h100x2  the machine's label in the result file names
#        GPU_CHECK_SKIP_BENCH=1    skip the benchmark
#        DIST_BENCH_ARGS="..."     extra arguments for dynemb_bench_dist
set -uo pipefail
cd "$(dirname "$0")/.."
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH="/usr/local/cuda/bin:$PATH"

out="${OUT:-gpu_check_out}"
results="$out/results"
mkdir -p "$out" "$results"
build="${1:-build-gpu}"
gpus=$(nvidia-smi --query-gpu=name --format=csv,noheader 2> /dev/null | wc -l)
machine="${GPU_CHECK_MACHINE:-h100x$gpus}"
summary="$out/summary_multi.txt"
status=0
step() { echo "=== $* ===" | tee -a "$summary"; }
record() {  # name rc
  echo "$1: $([ "$2" -eq 0 ] && echo PASS || echo "FAIL (rc $2)")" | tee -a "$summary"
  [ "$2" -eq 0 ] || status=1
}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader | tee -a "$summary"
nvidia-smi topo -m > "$out/topology.txt" 2>&1

if [ ! -x "$build/tests/dist/dynemb_dist_mpi_tests" ]; then
  step "configure + build (sm_90, Release) into $build"
  prefix_path=""
  [ -d .carry/deps ] && prefix_path="-DCMAKE_PREFIX_PATH=$PWD/.carry/deps"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYNEMB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DDYNEMB_BUILD_PYTHON=OFF $prefix_path > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1
  rc=$?
  record build $rc
  [ $rc -eq 0 ] || exit 1
fi
[ -d .carry/deps/lib/x86_64-linux-gnu ] &&
  export LD_LIBRARY_PATH="$PWD/.carry/deps/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
export DYNEMB_GIT_COMMIT="${DYNEMB_GIT_COMMIT:-$(cat "$build/COMMIT" 2> /dev/null || git rev-parse --short HEAD 2> /dev/null)}"

rank_counts=(1 2)
[ "$gpus" -ge 4 ] && rank_counts+=(4)
for n in "${rank_counts[@]}"; do
  [ "$n" -le "$gpus" ] || continue
  step "dynemb_dist_mpi_tests, $n ranks (NCCL, one GPU each)"
  timeout 300 mpirun --allow-run-as-root --bind-to none -np "$n" \
    "$build/tests/dist/dynemb_dist_mpi_tests" --gtest_color=no > "$out/dist_mpi_$n.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |dist MPI tests|^\[   SEED" "$out/dist_mpi_$n.log" | tail -8
  grep -E "^\[  FAILED  \]|^rank [0-9]+:" "$out/dist_mpi_$n.log" | head -20
  record "dist_mpi_tests_$n" $rc
done

if [ -z "${GPU_CHECK_SKIP_BENCH:-}" ]; then
  runs=()
  for n in "${rank_counts[@]}"; do
    [ "$n" -le "$gpus" ] || continue
    step "dynemb_bench_dist --backend cuda --shape 13m, $n GPUs"
    timeout 300 mpirun --allow-run-as-root --bind-to none -np "$n" "$build/bench/dist/dynemb_bench_dist" \
      --backend cuda --shape 13m --json "$out/dist_cuda_$n.json" ${DIST_BENCH_ARGS:-} \
      > "$out/dist_bench_$n.log" 2>&1
    rc=$?
    cat "$out/dist_bench_$n.log"
    record "dist_bench_$n" $rc
    [ $rc -eq 0 ] && runs+=("$out/dist_cuda_$n.json")
  done
  if [ ${#runs[@]} -gt 0 ]; then
    python3 - "$results/dist-cuda-$machine.json" "${runs[@]}" << 'PY'
import json, sys
out, files = sys.argv[1], sys.argv[2:]
runs = [json.load(open(f)) for f in files]
one = runs[0]["seconds_per_step_mean_over_ranks"]["step"]
summary = []
for r in runs:
    w = r["parameters"]["world_size"]
    step = r["seconds_per_step_max_over_ranks"]["step"]
    summary.append({"gpus": w, "step_s": step, "step_over_1_gpu": step / one,
                    "exchange_fraction_of_all_to_all_busbw":
                        r.get("exchange_fraction_of_all_to_all_busbw")})
    print(f"{w} GPU(s): step {step*1e3:.2f} ms = {step/one:.2f}x the 1-GPU step; exchange "
          f"{r.get('exchange_fraction_of_all_to_all_busbw') or 0:.0%} of the all-to-all busbw")
json.dump({"benchmark": "dist", "weak_scaling": summary, "runs": runs}, open(out, "w"), indent=2)
print("wrote", out)
PY
  fi
fi

for s in scripts/gpu_check_multi.d/*.sh; do
  [ -f "$s" ] || continue
  step "$s"
  timeout 300 bash "$s" "$build" > "$out/$(basename "$s" .sh).log" 2>&1
  rc=$?
  tail -15 "$out/$(basename "$s" .sh).log"
  record "$(basename "$s" .sh)" $rc
done
exit $status
