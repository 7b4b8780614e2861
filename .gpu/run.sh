#!/usr/bin/env bash
# step-speed (issue 35 items 1-2), the final call: find_or_insert_pointers and
# find_or_reserve_pointers on every cell of the table benchmark, the training step, the pointer
# tests, and HKV's find_or_insert* (dim 64) in the same call. ~120 s; HKV goes last (its time
# is whatever is left). Runs in the integration tree's root with build-gpu; HKV from .peers.
set -u
o=/tmp/step-speed-gpu; rm -rf "$o"; mkdir -p "$o" "$OUT/step-speed"
export PATH=/usr/local/cuda/bin:$PATH
hkv=.peers/bin/hkv_benchmark; [ -x "$hkv" ] || hkv=/work/main/.peers/bin/hkv_benchmark
d=build-gpu/tools/dynemb/dynemb
start=$(date +%s)
log() { echo "== $* ($(date -u +%T), +$(( $(date +%s) - start )) s)"; }
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1
log build; ninja -C build-gpu dynemb_program dynemb_tests > "$o/build.log" 2>&1 || tail -30 "$o/build.log"
log "dynemb bench table: find_or_insert_pointers, find_or_reserve_pointers (dims 8/32/64, λ 0.5/0.75/1)"
timeout 60 $d bench table --backend cuda --repeats 2 \
  --ops find_or_insert_pointers,find_or_reserve_pointers \
  --json "$o/table.json" --markdown "$o/table.md" > "$o/table.txt" 2>&1; echo "rc=$?" >> "$o/table.txt"
python3 - "$o/table.json" <<'PY'
import json, sys
try: d = json.load(open(sys.argv[1]))
except Exception as e: print("no json:", e); sys.exit()
for r in d["results"]:
    print("dim", r["dim"], "lf", r["load_factor"],
          " ".join(f'{k}={v["dynemb"]["b_kv_s"]:.3f}' for k, v in sorted(r["ops"].items())))
PY
tail -1 "$o/table.txt"
for shape in 13m 1m; do
  log "dynemb bench train $shape"
  timeout 25 $d bench train --backend cuda --shape $shape --json "$o/train-$shape.json" \
    > "$o/train-$shape.txt" 2>&1; echo "rc=$?" >> "$o/train-$shape.txt"
  grep -E '^\| (step|forward|  )|rc=' "$o/train-$shape.txt"
done
log tests
timeout 25 build-gpu/tests/dynemb_tests \
  --gtest_filter='TablePointersTest/*:CudaScoreBounds*:*EmbeddingRowAddresses*:*EmbeddingCollectionTest*' \
  > "$o/tests.txt" 2>&1; echo "rc=$?" >> "$o/tests.txt"
grep -E '^\[  (PASSED|FAILED)|FAILED|rc=|SEED' "$o/tests.txt" | grep -v "^\[   SEED" | head -12
grep -B2 -A8 'Failure' "$o/tests.txt" | head -30
left=$(( 118 - ($(date +%s) - start) )); [ $left -lt 5 ] && left=5
log "HKV ae24eec hbm dim 64, 64M (timeout ${left} s)"
timeout $left $hkv hbm 64 64 16 a > "$o/hkv-64.txt" 2>&1; echo "rc=$?" >> "$o/hkv-64.txt"
grep -E '^\||rc=' "$o/hkv-64.txt"
log done
} 2>&1 | tee "$OUT/step-speed/summary.txt"
tar -czf "$OUT/step-speed/results.tar.gz" -C "$o" . 2>/dev/null
