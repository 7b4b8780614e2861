// The stream a call is ordered on.
#pragma once

namespace dynemb {

// An opaque stream: a cudaStream_t for the CUDA backend (nullptr = the default stream); ignored
// by the CPU backend.
using StreamHandle = void*;

}  // namespace dynemb
