#!/usr/bin/env bash
# Hybrid-mode experiment (issue 36): random host-row access methods, HKV's hybrid benchmark and
# dynemb's hybrid cells in one call. Runs in the integration tree's root; build-gpu exists.
set -u
o=/tmp/hybrid-gpu; rm -rf "$o"; mkdir -p "$o" "$OUT/hybrid"
export PATH=/usr/local/cuda/bin:$PATH
log() { echo "== $* ($(date -u +%T))"; }
{
{ nvidia-smi --query-gpu=name,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5; numactl -H 2>/dev/null | head -4
  lscpu | grep -E 'Model name|NUMA|Socket'; cat /sys/kernel/mm/transparent_hugepage/enabled
  grep -i huge /proc/meminfo | head -3; free -g | head -2; } > "$o/machine.txt" 2>&1
log build; ninja -C build-gpu dynemb_bench_host_rows dynemb_program dynemb_tests > "$o/build.log" 2>&1 || { tail -20 "$o/build.log"; }
log "tests: hybrid tables (large calls in bucket order, rows in host memory)"
timeout 60 build-gpu/tests/dynemb_tests --gtest_filter='CudaHybridOrder.*:CudaTable.Hybrid*' > "$o/tests.txt" 2>&1
echo "rc=$?" >> "$o/tests.txt"; grep -E '^\[  (PASSED|FAILED)|FAILED|rc=|seed' "$o/tests.txt" | head -8
log "host rows (16 GiB, 512K rows)"
timeout 110 build-gpu/bench/dynemb_bench_host_rows --gib 16 --rows 524288 \
  --json "$o/host-rows.json" > "$o/host-rows.txt" 2>&1; echo "rc=$?" >> "$o/host-rows.txt"
log "HKV ae24eec hybrid dim 64 128M 16 GB"
timeout 100 .peers/bin/hkv_benchmark hybrid 64 128 16 a > "$o/hkv-hybrid.txt" 2>&1; echo "rc=$?" >> "$o/hkv-hybrid.txt"
log "dynemb hybrid dim 64 128M 16 GB"
timeout 120 build-gpu/tools/dynemb/dynemb bench table --backend cuda --dims 64 --capacity 134217728 \
  --hbm-budget-gb 16 --load-factors 0.5,1.0 \
  --ops find,insert_or_assign,find_or_insert,assign,insert_and_evict,export,find_or_insert_pointers \
  --json "$o/table-hybrid.json" --markdown "$o/table-hybrid.md" > "$o/table-hybrid.txt" 2>&1
echo "rc=$?" >> "$o/table-hybrid.txt"
log done
tar -czf "$OUT/hybrid/hybrid-results.tar.gz" -C "$o" . 
cat "$o/host-rows.txt" | cut -c1-200 | head -40
grep -E '^\||rc=' "$o/hkv-hybrid.txt"
grep -A5 'dynemb, B-KV/s' "$o/table-hybrid.md" 2>/dev/null | head -6; tail -3 "$o/table-hybrid.txt"
} 2>&1 | tee "$OUT/hybrid/summary.txt"
