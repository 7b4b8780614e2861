#!/usr/bin/env bash
# Sets up (if needed), builds and runs every test: the include arrows between parts, the
# GoogleTest suite (CUDA tests skip without a GPU), the numpy reading of a checkpoint, a project
# built against the installed library, and the concurrency tests under ThreadSanitizer (in a
# shared-library build).
set -euo pipefail
cd "$(dirname "$0")/.."

# No include may break an arrow between parts (docs/architecture.md); lists the edges.
python3 scripts/check_arrows.py

bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

# The checkpoint format is readable with numpy from its documentation alone: a short training
# run writes one, the documented reader verifies it, and must reject a copy with a flipped byte.
ckpt_dir="$(mktemp -d)"
trap 'rm -rf "$ckpt_dir"' EXIT
build/tools/dynemb/dynemb train --samples 20000 --eval-samples 2000 \
  --checkpoint-dir "$ckpt_dir/ckpt" --output-dir "$ckpt_dir/out" > "$ckpt_dir/train.log" 2>&1
/usr/bin/python3 tests/checkpoint/read_with_numpy.py "$ckpt_dir/ckpt/model"
cp -r "$ckpt_dir/ckpt/model" "$ckpt_dir/damaged"
values_file="$(find "$ckpt_dir/damaged" -name '*values*' -type f | head -n 1)"
printf '\xff' | dd of="$values_file" bs=1 seek=100 conv=notrunc status=none
if /usr/bin/python3 tests/checkpoint/read_with_numpy.py "$ckpt_dir/damaged" > /dev/null; then
  echo "numpy reader accepted a damaged checkpoint" >&2
  exit 1
fi
cp -r "$ckpt_dir/ckpt/model" "$ckpt_dir/edited"
sed -i 's/"optimizer": "ftrl"/"optimizer": "adam"/' "$ckpt_dir/edited/manifest.json"
if /usr/bin/python3 tests/checkpoint/read_with_numpy.py "$ckpt_dir/edited" > /dev/null; then
  echo "numpy reader accepted an edited manifest" >&2
  exit 1
fi
echo "numpy checkpoint reader: the checkpoint verified, the damaged copy and the edited manifest were rejected"

# The dynemb program's usage errors (exit 2) and its refusal to overwrite another run.
bash tests/train/cli_usage_test.sh build/tools/dynemb/dynemb

# The readers and metrics on random inputs with NaN / inf / overflowing values, under UBSan and
# ASan (a bounded run of the seeded driver; docs/train.md, "Fuzzing the readers and metrics").
fuzz_bin="$ckpt_dir/train_input_fuzz"
fuzz_src="tools/train/metrics.cpp tools/train/text_readers.cpp tools/train/stop_request.cpp src/core/error.cpp"
# shellcheck disable=SC2086
c++ -std=c++20 -O1 -g -fsanitize=undefined,address -fno-sanitize-recover=all -Iinclude -Isrc \
  -Itools tests/train/fuzz/train_input_fuzz.cpp tests/train/fuzz/random_driver.cpp $fuzz_src \
  -o "$fuzz_bin"
"$fuzz_bin" 20000

# The dist part's multi-process tests under mpirun on loopback, at 2 and 3 (uneven) ranks; a
# timeout turns a hang into a failure. CI runs as root, which Open MPI must be told to allow.
if [ -x build/tests/dist/dynemb_dist_mpi_tests ]; then
  for ranks in 2 3; do
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
      OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_mpi_yield_when_idle=1 \
      timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$ranks" \
      build/tests/dist/dynemb_dist_mpi_tests
  done
fi

# The wholememory part's multi-process tests: under mpirun at 2 and 3 ranks, and once with ranks
# the binary forks itself (the socket communicator the GPU check uses where no mpirun is).
if [ -x build/tests/wholememory/dynemb_wholememory_mpi_tests ]; then
  if command -v mpirun > /dev/null; then
    for ranks in 2 3; do
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader \
        OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo OMPI_MCA_mpi_yield_when_idle=1 \
        timeout 300 mpirun --oversubscribe --allow-run-as-root -np "$ranks" \
        build/tests/wholememory/dynemb_wholememory_mpi_tests
    done
  fi
  timeout 300 build/tests/wholememory/dynemb_wholememory_mpi_tests --ranks=2
fi

# `cmake --install` into a fresh prefix, and examples/consumer built against it with
# find_package(dynemb CONFIG), run: it checks a table against a std::map.
install_dir="$(mktemp -d)"
trap 'rm -rf "$ckpt_dir" "$install_dir"' EXIT
cmake --install build --prefix "$install_dir/prefix" > /dev/null
cmake -S examples/consumer -B "$install_dir/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$install_dir/prefix" > /dev/null
cmake --build "$install_dir/build" > /dev/null
"$install_dir/build/table_consumer"

# The Python suite (tests/python, pytest) with Debian's PyTorch, on the module staged in
# build/python; pytest's exit code 5 (no test collected) is a failure too.
[ -f build/python/dynemb/__init__.py ] || { echo "the Python module was not built" >&2; exit 1; }
pytest_rc=0
DYNEMB_PROGRAM="$PWD/build/tools/dynemb/dynemb" PYTHONPATH="$PWD/build/python" \
  /usr/bin/python3 -m pytest -q -p no:cacheprovider -rs tests/python || pytest_rc=$?
if [ "$pytest_rc" -ne 0 ]; then
  echo "pytest failed (rc $pytest_rc)" >&2
  exit 1
fi

# The concurrency tests again, in a ThreadSanitizer build of the host code, whose parts are shared
# libraries (so CI builds and runs the shared build too).
DYNEMB_BUILD_DIR=build-tsan bash scripts/setup.sh -DDYNEMB_SANITIZE=thread -DDYNEMB_CUDA=OFF \
  -DDYNEMB_BUILD_TOOLS=OFF -DDYNEMB_BUILD_PYTHON=OFF -DBUILD_SHARED_LIBS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" -R 'Concurrency|Stress|Pooling|EmbeddingTraining'
