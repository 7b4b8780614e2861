// Lets one function body compile for both the host and CUDA devices.
#pragma once

#if defined(__CUDACC__)
#define DYNEMB_HD __host__ __device__ __forceinline__
#else
#define DYNEMB_HD inline
#endif
