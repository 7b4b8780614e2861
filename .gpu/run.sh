#!/usr/bin/env bash
# cache-speed (issues 30 + 29): the CUDA cache's and the caching table's GPU tests, then
# `dynemb bench cache` at 2K and 64K keys per call against HugeCTR's gpu_cache in the same run.
# Runs in the integration tree's root; build-gpu (Release, CUDA on, sm_90) exists.
set -u
o=$OUT/cache-speed; mkdir -p "$o"
export PATH=/usr/local/cuda/bin:$PATH
log() { echo "== $* ($(date -u +%T))"; }
{
log build
ninja -C build-gpu dynemb_tests dynemb > "$o/build.log" 2>&1 || tail -20 "$o/build.log"
peer=.peers/bin/hugectr_cache_peer
if [ ! -x "$peer" ] && [ -d .peers/hugectr-2f2016f/gpu_cache ]; then
  log "building the HugeCTR peer (beside the tests)"
  timeout 50 bash bench/cache/hugectr_peer/build.sh .peers/hugectr-2f2016f "$peer" 90 \
    > "$o/peer-build.log" 2>&1 &
fi
log tests
timeout 40 build-gpu/tests/dynemb_tests \
  --gtest_filter='Backends/Cache*.*/cuda:CacheCudaStreams.*:Backends/CachedTraining.*/cuda' \
  > "$o/tests.txt" 2>&1; echo "rc=$?" >> "$o/tests.txt"
wait
log "bench cache (2K, 64K keys per call)"
peer_arg=(); [ -x "$peer" ] && peer_arg=(--peer "$peer")
DYNEMB_BENCH_MACHINE=h100 timeout 70 build-gpu/tools/dynemb/dynemb bench cache --backend cuda \
  --batches 2048 65536 --no-curve --seed 12345 "${peer_arg[@]}" \
  --json "$o/cache-cuda-h100.json" > "$o/bench-cache.txt" 2>&1; echo "rc=$?" >> "$o/bench-cache.txt"
log done
grep -E '^\[  (PASSED|FAILED) |^\[  SKIPPED|tests ran|FAILED|rc=' "$o/tests.txt" | head -20
tail -40 "$o/bench-cache.txt" | cut -c1-220
} 2>&1 | tee "$o/summary.txt"
