#!/usr/bin/env bash
# step-speed (issue 35 items 1-2): find_or_insert_pointers against HKV's find_or_insert* in one
# call, its variants (DYNEMB_EXP_* switches), the training step, and the CUDA tests it touches.
# Runs in the integration tree's root with build-gpu; needs /work/main/.peers (or .peers) carried.
set -u
o=/tmp/step-speed-gpu; rm -rf "$o"; mkdir -p "$o" "$OUT/step-speed"
export PATH=/usr/local/cuda/bin:$PATH
hkv=.peers/bin/hkv_benchmark; [ -x "$hkv" ] || hkv=/work/main/.peers/bin/hkv_benchmark
d=build-gpu/tools/dynemb/dynemb
log() { echo "== $* ($(date -u +%T))"; }
tb() {  # name env... -- args...: one dynemb bench table run, pointer ops
  local name=$1; shift; local envs=(); while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" timeout 60 $d bench table --backend cuda --repeats 2 "$@" \
    --json "$o/table-$name.json" --markdown "$o/table-$name.md" > "$o/table-$name.txt" 2>&1
  echo "rc=$?" >> "$o/table-$name.txt"
  python3 - "$o/table-$name.json" "$name" <<'PY'
import json, sys
try: d = json.load(open(sys.argv[1]))
except Exception as e: print(sys.argv[2], "no json:", e); sys.exit()
for r in d["results"]:
    print(sys.argv[2], "dim", r["dim"], "lf", r["load_factor"],
          " ".join(f'{k}={v["dynemb"]["b_kv_s"]:.3f}' for k, v in sorted(r["ops"].items())))
PY
}
{
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; git log --oneline -1
log build; ninja -C build-gpu dynemb_program dynemb_tests > "$o/build.log" 2>&1 || tail -30 "$o/build.log"
log tests
timeout 90 build-gpu/tests/dynemb_tests \
  --gtest_filter='TablePointersTest/*:TableDuplicatesTest/cuda*:TableEvictionTest/cuda*:TableScoresTest/cuda*:TableGrowthTest/cuda*:TableErrorsTest/cuda*:TableConcurrencyTest/cuda*:CudaTable*:CudaScoreBounds*:CudaParity*:*EmbeddingRowAddresses*:*EmbeddingCollection*:EmbeddingCudaParity*' \
  > "$o/tests.txt" 2>&1; echo "rc=$?" >> "$o/tests.txt"
grep -E '^\[  (PASSED|FAILED)|FAILED|rc=|seed' "$o/tests.txt" | head -20
DYNEMB_EXP_PTR_INIT=pass timeout 30 build-gpu/tests/dynemb_tests --gtest_filter='TablePointersTest/cuda*' \
  > "$o/tests-initpass.txt" 2>&1; echo "rc=$?" >> "$o/tests-initpass.txt"
echo "init pass:"; grep -E '^\[  (PASSED|FAILED)|FAILED|rc=' "$o/tests-initpass.txt" | head -8
log "HKV ae24eec pure HBM (find_or_insert* column)"
for cfg in "8 128 4" "32 128 16" "64 64 16"; do
  timeout 100 $hkv hbm $cfg a > "$o/hkv-${cfg%% *}.txt" 2>&1; echo "rc=$?" >> "$o/hkv-${cfg%% *}.txt"
  grep -E '^\||rc=' "$o/hkv-${cfg%% *}.txt"
done
log "dynemb: fused pass (default), 4-thread tiles to dim 64, 56 registers"
tb fused -- --ops find_or_insert_pointers,find_or_reserve_pointers
log "train"
for shape in 13m 1m; do
  for mode in "" --grouped-tables; do
    timeout 60 $d bench train --backend cuda --shape $shape $mode --json "$o/train-$shape$mode.json" \
      > "$o/train-$shape$mode.txt" 2>&1; echo "rc=$?" >> "$o/train-$shape$mode.txt"
    echo "train $shape $mode:"; grep -E '^\| (step|forward|  )|rc=' "$o/train-$shape$mode.txt"
  done
done
log "variants (find_or_insert_pointers only)"
tb ownregs DYNEMB_EXP_PTR_OWN_REGS=1 -- --ops find_or_insert_pointers,find_or_reserve_pointers --dims 8,64 --load-factors 0.5,1.0
tb initpass DYNEMB_EXP_PTR_INIT=pass -- --ops find_or_insert_pointers --dims 8,64 --load-factors 0.5,1.0
tb tile8 DYNEMB_EXP_PTR_TILE4_WIDEST=32 -- --ops find_or_insert_pointers --dims 64 --load-factors 1.0
tb locked DYNEMB_EXP_PTR_PASS=locked -- --ops find_or_insert_pointers --dims 8,64 --load-factors 0.5,1.0
tb findrefresh DYNEMB_EXP_PTR_REFRESH=find -- --ops find_or_insert_pointers --dims 8,64 --load-factors 1.0
tb twopass DYNEMB_EXP_PTR_PASS=two_pass -- --ops find_or_insert_pointers --dims 64 --load-factors 1.0
log done
} 2>&1 | tee "$OUT/step-speed/summary.txt"
tar -czf "$OUT/step-speed/results.tar.gz" -C "$o" .
