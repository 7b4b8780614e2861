#!/usr/bin/env bash
# Builds HugeCTR's gpu_cache with peer_main.cu into a peer binary for `dynemb bench cache --peer`.
# HugeCTR's sources stay outside version control: pass a directory holding its gpu_cache/ folder
# (e.g. `git archive` of NVIDIA-Merlin/HugeCTR's gpu_cache into .peers/, which .gitignore lists).
#
# usage: bash bench/cache/hugectr_peer/build.sh HUGECTR_DIR OUT_BINARY [CUDA_ARCH=90]
set -euo pipefail
hugectr=${1:?HugeCTR directory (holding gpu_cache/)}
out=${2:?output binary}
arch=${3:-90}
repo=$(cd "$(dirname "$0")/../../.." && pwd)
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
mkdir -p "$(dirname "$out")"
# -DLIBCUDACXX_VERSION: HugeCTR's libcu++ locks and atomics (ANCHORS.md's build).
"$nvcc" -O3 -std=c++17 -arch="sm_${arch}" -DLIBCUDACXX_VERSION \
  -I"$hugectr/gpu_cache/include" -I"$repo" \
  "$hugectr/gpu_cache/src/nv_gpu_cache.cu" \
  "$repo/bench/cache/hugectr_peer/peer_main.cu" \
  "$repo/bench/cache/key_stream.cpp" \
  -o "$out"
echo "$out"
