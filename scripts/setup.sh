#!/usr/bin/env bash
# Installs every Debian package dynemb needs, then configures and builds it into build/.
# Usage: bash scripts/setup.sh [extra cmake arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  cmake ninja-build g++ pkg-config git
  libgtest-dev libgmock-dev        # unit tests
  libcuckoo-dev libabsl-dev        # CPU peers measured by `dynemb bench table`
  libcli11-dev                     # the dynemb program's command line
  nlohmann-json3-dev               # checkpoint manifests, benchmark and training results
  python3 python3-numpy            # reads a checkpoint with numpy alone (scripts/test.sh);
                                   # python3 also runs scripts/check_arrows.py
  python3-dev pybind11-dev         # the Python module dynemb._C (python/)
  python3-torch python3-pytest     # the Python suite (tests/python, scripts/test.sh)
  libopenmpi-dev openmpi-bin       # dist: the MPI communicator and its multi-process tests
  librocksdb-dev libhiredis-dev    # the storage part's disk (RocksDB) and Redis tiers
  redis-server                     # the Redis tier's tests start their own servers on loopback
  rocksdb-tools                    # ldb (a foreign database in a test) and db_bench (the peer)
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# nvcc is optional: the CUDA backend is built where it is found.
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH="/usr/local/cuda/bin:$PATH"; fi

build_dir="${DYNEMB_BUILD_DIR:-build}"
# The Python module is built for Debian's interpreter (the one with python3-torch).
python_args=()
if [ -x /usr/bin/python3 ]; then python_args=(-DPython_EXECUTABLE=/usr/bin/python3); fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release "${python_args[@]}" "$@"
cmake --build "$build_dir" -j "$(nproc)"
