// EXPERIMENT (issue 35, one GPU round): run-time switches between kernel variants, so that one
// process can time several variants of the same step. DYNEMB_OPS_VARIANT holds comma-separated
// tokens; it is read at every launch that asks (host side, a few per step, not in replays).
// To be removed once the winners are the defaults.
#pragma once

#include <cstdlib>
#include <cstring>

namespace dynemb::ops::cuda {

// Whether DYNEMB_OPS_VARIANT names `token` (an exact comma-separated item).
inline bool kernel_variant(const char* token) {
  const char* v = std::getenv("DYNEMB_OPS_VARIANT");
  if (v == nullptr) return false;
  const size_t n = std::strlen(token);
  for (const char* p = v; *p != '\0';) {
    const char* end = std::strchr(p, ',');
    const size_t len = end == nullptr ? std::strlen(p) : static_cast<size_t>(end - p);
    if (len == n && std::strncmp(p, token, n) == 0) return true;
    if (end == nullptr) break;
    p = end + 1;
  }
  return false;
}

}  // namespace dynemb::ops::cuda
