#!/usr/bin/env bash
# Sets up (if needed), builds and runs every test: the GoogleTest suite (CUDA tests skip
# without a GPU) and the multi-threaded stress test under ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/setup.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

# The concurrency tests again, in a ThreadSanitizer build of the host code.
DYNEMB_BUILD_DIR=build-tsan bash scripts/setup.sh -DDYNEMB_SANITIZE=thread -DDYNEMB_CUDA=OFF \
  -DDYNEMB_BUILD_TOOLS=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo
TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1" \
  ctest --test-dir build-tsan --output-on-failure -j "$(nproc)" -R 'Concurrency|Stress|Pooling|EmbeddingTraining'
