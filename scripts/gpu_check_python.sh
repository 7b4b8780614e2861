#!/usr/bin/env bash
# The Python part of the GPU check: builds dynemb._C for this machine's python3 (its PyTorch;
# pybind11 from Debian or `python3 -m pybind11 --cmakedir`) into build-gpu-python, runs the
# pytest suite tests/python with the CUDA tests on, then bench/torch_step.py (dynemb's PyTorch
# step against nn.EmbeddingBag + SparseAdam and the C++ `dynemb bench train`, same shape, one
# process). Logs and JSON go to $OUT (else gpu_check_out/); summary_python.txt lists PASS/FAIL.
#
# Usage: bash scripts/gpu_check_python.sh [BUILD_DIR]
#   BUILD_DIR  a build holding tools/dynemb/dynemb (`dynemb inspect` in the tests, `bench train`
#              in the benchmark; default build-gpu); without one the program is built here too
#   env: GPU_CHECK_SKIP_BENCH=1  skip bench/torch_step.py
#        TORCH_STEP_ARGS="..."   extra arguments for bench/torch_step.py
# pytest: the machine's own, else a pure-Python copy in .carry/pytest (gitignored), made on a
# Debian machine with python3-pytest by
#   mkdir -p .carry/pytest && cp -r /usr/lib/python3/dist-packages/{pytest,_pytest,pluggy,\
#     iniconfig,packaging,py.py,attr,attrs} .carry/pytest/
set -uo pipefail
cd "$(dirname "$0")/.."

out="${OUT:-gpu_check_out}"
mkdir -p "$out" "$out/results"
summary="$out/summary_python.txt"
: > "$summary"
status=0
step() { echo "=== $* ===" | tee -a "$summary"; }
record() {  # name rc
  echo "$1: $([ "$2" -eq 0 ] && echo PASS || echo "FAIL (rc $2)")" | tee -a "$summary"
  [ "$2" -eq 0 ] || status=1
}

export PATH="/usr/local/cuda/bin:$PATH"
pybuild=build-gpu-python
program="${1:-build-gpu}/tools/dynemb/dynemb"
targets=(dynemb_python)
tools=OFF  # the module alone needs no benchmark peers (absl, libcuckoo), which a GPU machine may lack
if [ ! -x "$program" ]; then
  program="$pybuild/tools/dynemb/dynemb"
  targets+=(dynemb_program)
  tools=ON
fi
# Header-only dependencies the machine lacks (nlohmann_json) may come in a prefix, .carry/deps
# (include/ and share/cmake/ copied from a Debian machine).
prefix_path=""
[ -d .carry/deps ] && prefix_path="-DCMAKE_PREFIX_PATH=$PWD/.carry/deps"
# Shared libraries from that prefix (absl, for a program built here) are found at run time too.
deps_lib="$PWD/.carry/deps/lib/x86_64-linux-gnu"
[ -d "$deps_lib" ] && export LD_LIBRARY_PATH="$deps_lib:${LD_LIBRARY_PATH:-}"
if [ -n "${1:-}" ] && [ -f "$1/python/dynemb/__init__.py" ] && ls "$1"/python/dynemb/_C*.so > /dev/null 2>&1; then
  # The build directory already holds the module (configured with -DDYNEMB_BUILD_PYTHON=ON for
  # this machine's python3): test that one instead of building a second copy.
  pybuild="$1"
  step "Python module ($(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1)) from $pybuild"
  record python_build 0
else
  step "Python module ($(python3 --version 2>&1), torch $(python3 -c 'import torch; print(torch.__version__)' 2>&1)) into $pybuild: ${targets[*]}"
  cmake -S . -B "$pybuild" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYNEMB_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DDYNEMB_BUILD_PYTHON=ON -DDYNEMB_BUILD_TESTS=OFF \
    -DDYNEMB_BUILD_TOOLS=$tools $prefix_path \
    -DPython_EXECUTABLE="$(command -v python3)" > "$out/python_build.log" 2>&1 &&
    cmake --build "$pybuild" --target "${targets[@]}" -j "$(nproc)" >> "$out/python_build.log" 2>&1
  rc=$?
  tail -3 "$out/python_build.log"
  record python_build $rc
  [ $rc -eq 0 ] || exit 1
fi
program="$(cd "$(dirname "$program")" && pwd)/dynemb"

step "pytest tests/python (CUDA tests enabled)"
pythonpath="$PWD/$pybuild/python"
if ! python3 -c "import pytest" 2> /dev/null && [ -d .carry/pytest ]; then
  pythonpath="$pythonpath:$PWD/.carry/pytest"
fi
pytest_rc=0
DYNEMB_PROGRAM="$program" PYTHONPATH="$pythonpath" \
  python3 -m pytest -v -rs -p no:cacheprovider tests/python > "$out/pytest.log" 2>&1 || pytest_rc=$?
tail -15 "$out/pytest.log"
record pytest $pytest_rc  # 5 (nothing collected) counts as a failure

if [ "${GPU_CHECK_SKIP_BENCH:-0}" != 1 ]; then
  step "bench/torch_step.py (13m shape: 10 tables x 2^20 ids x dim 128, batch 65,536 x 20, Zipf 1.05)"
  # shellcheck disable=SC2086
  PYTHONPATH="$PWD/$pybuild/python" python3 bench/torch_step.py --device cuda \
    --dynemb-program "$program" --json "$out/results/torch-step-cuda-${GPU_CHECK_MACHINE:-h100}.json" ${TORCH_STEP_ARGS:-} 2>&1 | tail -20
  record torch_step "${PIPESTATUS[0]}"
fi
exit $status
