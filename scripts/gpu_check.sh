#!/usr/bin/env bash
# The single GPU check of dynemb: builds for sm_90 (or uses a prebuilt build directory given
# as the first argument), runs the whole dynemb_tests binary on the GPU, compute-sanitizer
# memcheck and racecheck on the CUDA tests, and the GPU benchmarks. Logs go to $OUT when it is
# set (else to gpu_check_out/); the benchmarks' result files go to its results/ folder under the
# stable names of bench/results/ (e.g. table-cuda-h100.json): copying them over bench/results/
# replaces each benchmark's current result (bench/results/README.md says how to refresh).
#
# Usage: bash scripts/gpu_check.sh [BUILD_DIR]   (a carried BUILD_DIR may hold a COMMIT file
#        naming the commit it was built from; the result files then name it)
#   env: GPU_CHECK_TEST_FILTER="..." gtest filter of the full run (default: every test)
#        GPU_CHECK_SKIP_BENCH=1     skip the benchmarks
#        GPU_CHECK_HYBRID=1         also run the hybrid table benchmark (dim 64, 128M, 16 GB HBM, λ 0.5 / 0.75 / 1)
#        GPU_CHECK_BENCH_ARGS="..." extra arguments for `dynemb bench table`
#        (`dynemb bench train --backend cuda` runs after it, shapes 13m and 1m, each also with
#        --grouped-tables, then
#        `dynemb bench dedup --backend cuda`)
#        GPU_CHECK_MEMCHECK_FILTER, GPU_CHECK_RACECHECK_FILTER  gtest filters of the sanitizer runs
#        GPU_CHECK_SANITIZE_TIMEOUT  seconds per sanitizer run (default 300)
#        GPU_CHECK_TOOLS="memcheck racecheck"  the sanitizer tools to run ("" runs none; a device call is
#        limited to 10 minutes: run them in separate calls there)
#        GPU_CHECK_SKIP_PYTHON=1    skip scripts/gpu_check_python.sh (dynemb._C for the machine's
#                                   python3, tests/python with CUDA, bench/torch_step.py)
#        GPU_CHECK_MACHINE=h100     the machine's label in the result file names
#        GPU_CHECK_PACK_LOGS=1      move the logs, tests.json and summary.txt into logs.tar.xz at
#                                   the end (results/ stays loose)
#        GPU_CHECK_SKIP_TESTS=1     skip the dynemb_tests run (a device call split in parts)
#        GPU_CHECK_BENCHES="table train dedup cache caching fm"  the benchmarks to run (default: all)
#        GPU_CHECK_HKV=PATH         HierarchicalKV's benchmark binary (built from its public source
#                                   outside the repository): its HBM run (dim 64, 64M) before the
#                                   table benchmark, its hybrid run before the hybrid benchmark,
#                                   each passed to it (--hkv-output: same-call ratios in the JSON)
#        GPU_CHECK_HUGECTR_PEER=PATH HugeCTR gpu_cache peer (bench/cache/hugectr_peer/build.sh) for
#                                   `dynemb bench cache --peer`
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-gpu_check_out}"
results="$out/results"
machine="${GPU_CHECK_MACHINE:-h100}"
mkdir -p "$out" "$results"
build="${1:-}"
status=0

step() { echo "=== $* ===" | tee -a "$out/summary.txt"; }
record() {  # name rc
  echo "$1: $([ "$2" -eq 0 ] && echo PASS || echo "FAIL (rc $2)")" | tee -a "$out/summary.txt"
  [ "$2" -eq 0 ] || status=1
}

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
  tee -a "$out/summary.txt"

if [ -z "$build" ]; then
  build=build-gpu
  step "configure + build (sm_90, Release) into $build"
  export PATH="/usr/local/cuda/bin:$PATH"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYNEMB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DDYNEMB_BUILD_PYTHON=OFF > "$out/build.log" 2>&1 &&
    cmake --build "$build" -j "$(nproc)" >> "$out/build.log" 2>&1
  rc=$?
  record build $rc
  [ $rc -eq 0 ] || exit 1
fi
tests="$build/tests/dynemb_tests"
# The commit the results name: the COMMIT file a carried build brings (the source the binaries
# were built from), else this checkout's. A copied checkout's git metadata can be older than its
# files (seen on the lent device: it named 2b036ba for a build of 69e547c).
if [ -z "${DYNEMB_GIT_COMMIT:-}" ]; then
  DYNEMB_GIT_COMMIT="$(cat "$build/COMMIT" 2> /dev/null || git rev-parse --short HEAD 2> /dev/null || true)"
  export DYNEMB_GIT_COMMIT
fi
# Test data from this checkout (a carried build would look in the tree it was built from).
export DYNEMB_TEST_DATA_DIR="${DYNEMB_TEST_DATA_DIR:-$PWD/tests/data}"
# A carried build may bring the shared libraries the device machine lacks (absl) in lib/.
[ -d "$build/lib" ] && export LD_LIBRARY_PATH="$(cd "$build/lib" && pwd):${LD_LIBRARY_PATH:-}"
[ -x "$tests" ] || { echo "no test binary at $tests"; exit 1; }

if [ "${GPU_CHECK_SKIP_TESTS:-0}" != 1 ]; then
  step "dynemb_tests (every test, CUDA ones included)"
  "$tests" --gtest_color=no --gtest_filter="${GPU_CHECK_TEST_FILTER:-*}" \
    --gtest_output="json:$out/tests.json" > "$out/tests.log" 2>&1
  rc=$?
  grep -E "^\[  (PASSED|FAILED|SKIPPED) |^\[==========\]" "$out/tests.log" | tail -20
  grep -E "^\[  FAILED  \]" "$out/tests.log" | head -40
  record dynemb_tests $rc
fi

# memcheck covers the CUDA tests of one key type; racecheck (much slower) a smaller set.
memcheck_filter="${GPU_CHECK_MEMCHECK_FILTER:-CudaTable*:CudaPointerKernel.EvictingKeys*:CudaHybridOrder.LargeCallsWithOneBlockAnSm:CudaGroupedWrites.*:CudaScoreBounds.*:*cuda_int64*:OpsCudaParity*:OpsCudaFastPaths*:EmbeddingCudaParity*:EmbeddingAlignedRows*:*RowAddresses*:Backends/FusedBackward.*/cuda:Backends/DedupWorkspace.*/cuda:TrainFmModelCuda.*:TrainGpuSyntheticStream.*:Backends/EmbeddingCollectionTest.*/cuda:CudaWarningReports.*:-*Concurrency*:CudaTable.Threads*:CudaTableFullLoad.Grouped*}"
racecheck_filter="${GPU_CHECK_RACECHECK_FILTER:-CudaTable.Duplicate*:CudaPointerKernel.EvictingKeys*:CudaHybridOrder.LargeCallsWithOneBlockAnSm:CudaGroupedWrites.*:CudaScoreBounds.*OneBucket:TableDuplicatesTest/cuda_grouped_int64.*:TableDuplicatesTest/cuda_int64.*:TablePointersTest/cuda_int64.*:TableOpsTest/cuda_int64.*:*RowAddresses*/cuda*:OpsCudaFastPaths.*:Backends/FusedBackward.*/cuda:Backends/EmbeddingCollectionTest.*/cuda:CudaWarningReports.*}"
# Tests that launch from several host threads (EmbeddingStreams, *Concurrency*) stay out of the
# sanitizer runs: racecheck loses track of their launches ("failure to track a kernel launch").
sanitize_timeout="${GPU_CHECK_SANITIZE_TIMEOUT:-300}"
if command -v compute-sanitizer > /dev/null; then
  for tool in ${GPU_CHECK_TOOLS-memcheck racecheck}; do
    filter="$memcheck_filter"
    [ "$tool" = racecheck ] && filter="$racecheck_filter"
    step "compute-sanitizer --tool $tool ($filter)"
    timeout "$sanitize_timeout" compute-sanitizer --tool "$tool" --error-exitcode 99 --print-limit 20 \
      "$tests" --gtest_color=no --gtest_filter="$filter" > "$out/sanitizer_$tool.log" 2>&1
    rc=$?
    grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^\[  (PASSED|FAILED) " "$out/sanitizer_$tool.log" | tail -5
    record "sanitizer_$tool" $rc
  done
else
  echo "compute-sanitizer not found: sanitizer runs skipped" | tee -a "$out/summary.txt"
fi

# The Python part (its own build of dynemb._C for this machine's python3, tests/python with
# CUDA, bench/torch_step.py): scripts/gpu_check_python.sh, which also runs alone.
if [ "${GPU_CHECK_SKIP_PYTHON:-0}" != 1 ]; then
  OUT="$out" bash scripts/gpu_check_python.sh "$build"
  rc=$?
  cat "$out/summary_python.txt" 2> /dev/null >> "$out/summary.txt"
  [ $rc -eq 0 ] || status=1
fi

wants() { [[ " ${GPU_CHECK_BENCHES:-table train dedup hybrid cache caching fm} " == *" $1 "* ]]; }
if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
  program="$build/tools/dynemb/dynemb"
  if [ -x "$program" ]; then
    if wants table; then
      # HKV first, so the benchmark's ratios (and JSON) stand on HKV's run in this call
      # (--hkv-output) where it has the cell.
      hkv_hbm=()
      if [ -n "${GPU_CHECK_HKV:-}" ]; then
        step "HierarchicalKV's benchmark, HBM (dim 64, 64M slots), same call"
        timeout 150 "$GPU_CHECK_HKV" hbm 64 64 16 a > "$results/hkv-hbm-64-$machine.txt" 2>&1
        rc=$?
        grep -E '^\|' "$results/hkv-hbm-64-$machine.txt"
        record hkv_hbm $rc
        grep -qE '^\| [0-9]' "$results/hkv-hbm-64-$machine.txt" &&
          hkv_hbm=(--hkv-output "$results/hkv-hbm-64-$machine.txt")
      fi
      step "dynemb bench table --backend cuda ${GPU_CHECK_BENCH_ARGS:-}"
      # shellcheck disable=SC2086
      "$program" bench table --backend cuda --json "$results/table-cuda-$machine.json" \
        --markdown "$results/table-cuda-$machine.md" ${hkv_hbm[@]+"${hkv_hbm[@]}"} \
        ${GPU_CHECK_BENCH_ARGS:-} 2>&1 | tail -60
      rc=${PIPESTATUS[0]}
      record bench $rc
    fi
    if wants train; then
      for shape in 13m 1m; do
        lookups=13107k
        [ "$shape" = 1m ] && lookups=1024k
        step "dynemb bench train --backend cuda --shape $shape"
        "$program" bench train --backend cuda --shape "$shape" \
          --json "$results/train-cuda-$lookups-$machine.json" 2>&1 | tail -14
        rc=${PIPESTATUS[0]}
        record "bench_train_$shape" $rc
        step "dynemb bench train --backend cuda --shape $shape --grouped-tables (one EmbeddingCollection)"
        "$program" bench train --backend cuda --shape "$shape" --grouped-tables \
          --json "$results/train-cuda-$lookups-grouped-$machine.json" 2>&1 | tail -14
        rc=${PIPESTATUS[0]}
        record "bench_train_${shape}_grouped" $rc
      done
    fi
    if wants dedup; then
      step "dynemb bench dedup --backend cuda (the 13m shape's dedup: per table, side by side, one call)"
      "$program" bench dedup --backend cuda --json "$results/dedup-cuda-13107k-$machine.json" 2>&1 |
        tail -8
      record bench_dedup "${PIPESTATUS[0]}"
    fi
    if [ "${GPU_CHECK_HYBRID:-0}" = 1 ] && wants hybrid; then
      hkv_hybrid=()
      if [ -n "${GPU_CHECK_HKV:-}" ]; then
        step "HierarchicalKV's benchmark, hybrid (dim 64, 128M slots, 16 GB HBM), same call"
        timeout 240 "$GPU_CHECK_HKV" hybrid 64 128 16 a > "$results/hkv-hybrid-64-$machine.txt" 2>&1
        rc=$?
        grep -E '^\|' "$results/hkv-hybrid-64-$machine.txt"
        record hkv_hybrid $rc
        grep -qE '^\| [0-9]' "$results/hkv-hybrid-64-$machine.txt" &&
          hkv_hybrid=(--hkv-output "$results/hkv-hybrid-64-$machine.txt")
      fi
      step "dynemb bench table --backend cuda, hybrid (dim 64, 128M, 16 GB HBM, λ 0.5 / 0.75 / 1)"
      "$program" bench table --backend cuda --dims 64 --capacity 134217728 --hbm-budget-gb 16 \
        --load-factors 0.5,0.75,1.0 --json "$results/table-cuda-hybrid-$machine.json" \
        --markdown "$results/table-cuda-hybrid-$machine.md" ${hkv_hybrid[@]+"${hkv_hybrid[@]}"} \
        2>&1 | tail -30
      record bench_hybrid "${PIPESTATUS[0]}"
    fi
    if wants cache; then
      peer=()
      [ -n "${GPU_CHECK_HUGECTR_PEER:-}" ] && peer=(--peer "$GPU_CHECK_HUGECTR_PEER")
      step "dynemb bench cache --backend cuda ${peer[*]}"
      "$program" bench cache --backend cuda "${peer[@]}" --json "$results/cache-cuda-$machine.json" \
        2>&1 | tail -45
      rc=${PIPESTATUS[0]}
      record bench_cache $rc
      if [ $rc -eq 0 ] && python3 -c "import matplotlib" 2> /dev/null; then
        python3 bench/cache/plot_hit_rate.py "$results/cache-cuda-$machine.json" \
          "$results/cache-hit-rate-$machine.png" > /dev/null 2>&1
      fi
    fi
    caching="$build/bench/storage/dynemb_bench_caching"
    if wants caching && [ -x "$caching" ]; then
      step "dynemb_bench_caching --backend cuda (caching mode against hybrid mode, prefetch step)"
      "$caching" --backend cuda --json "$results/caching-cuda-$machine.json" 2>&1 | tail -40
      record bench_caching "${PIPESTATUS[0]}"
    fi
    if wants fm; then
      step "dynemb train --device cuda (defaults: batch 65536, 65.5M synthetic samples)"
      "$program" train --device cuda --progress lines --output-dir "${TMPDIR:-/tmp}/dynemb_gpu_check_train" \
        --metrics-json "$results/train-fm-cuda-$machine.json" 2>&1 | tail -4
      record train_cuda "${PIPESTATUS[0]}"
    fi
  else
    echo "no dynemb program at $program: benchmark skipped" | tee -a "$out/summary.txt"
  fi
fi

echo "--- summary ---"
cat "$out/summary.txt"
if [ -n "$(ls -A "$results")" ]; then
  echo "results (copy over bench/results/, then update bench/results/README.md):"
  ls "$results"
fi
if [ "${GPU_CHECK_PACK_LOGS:-0}" = 1 ]; then
  packed=$(cd "$out" && ls -- *.log tests.json summary.txt 2> /dev/null)
  if [ -n "$packed" ]; then
    # shellcheck disable=SC2086  # the names have no spaces (written above)
    (cd "$out" && tar -cJf logs.tar.xz $packed && rm -f $packed)
  fi
fi
exit $status
