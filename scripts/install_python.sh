#!/usr/bin/env bash
# Builds dynemb's Python package (the compiled module dynemb._C and the dynemb/ package) from
# this source tree with CMake, without network access, and installs it into a site directory.
# Usage: bash scripts/install_python.sh [SITE_DIR]
#   SITE_DIR  where the dynemb/ folder goes (default: the interpreter's platlib, e.g.
#             /usr/local/lib/python3.11/dist-packages); any directory on PYTHONPATH works
#   env: PYTHON=...            the interpreter to build for (default /usr/bin/python3)
#        DYNEMB_BUILD_DIR=...  the CMake build directory (default build)
# Needs pybind11 (Debian: pybind11-dev; pip: pybind11) and the interpreter's headers
# (python3-dev); scripts/setup.sh installs them from Debian.
set -euo pipefail
cd "$(dirname "$0")/.."

python="${PYTHON:-/usr/bin/python3}"
[ -x "$python" ] || python="$(command -v python3)"
build="${DYNEMB_BUILD_DIR:-build}"
site="${1:-$("$python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')}"
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDYNEMB_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE="$python" -DDYNEMB_PYTHON_INSTALL_DIR="$site"
cmake --build "$build" --target dynemb_python -j "$(nproc)"
cmake --install "$build" --component python
echo "dynemb installed into $site (check: $python -c 'import dynemb.torch')"
