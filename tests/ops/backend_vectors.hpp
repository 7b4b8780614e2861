// Host vectors in and out of a backend's memory, for the ops and embedding tests.
#pragma once

#include <cstring>
#include <vector>

#include "dynemb/core/memory.hpp"

namespace dynemb::ops_test {

// A buffer in `backend`'s memory holding a copy of `host` (one spare element, so an empty
// vector still gives a valid pointer).
template <class T>
BackendBuffer<T> upload(Backend backend, const std::vector<T>& host) {
  BackendBuffer<T> b(backend, host.size() + 1);
  if (!host.empty()) b.upload(host.data(), host.size());
  return b;
}

// The first `n` elements of a backend buffer, on the host.
template <class T>
std::vector<T> download(const BackendBuffer<T>& b, size_t n) {
  std::vector<T> h(n);
  if (n > 0) b.download(h.data(), n);
  return h;
}

// Whether two float vectors hold the same bits (NaNs and signed zeros included).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// upload() to the GPU.
template <class T>
BackendBuffer<T> to_gpu(const std::vector<T>& host) {
  return upload(Backend::kCuda, host);
}

// download() under the name the GPU tests use.
template <class T>
std::vector<T> to_host(const BackendBuffer<T>& b, size_t n) {
  return download(b, n);
}

}  // namespace dynemb::ops_test
