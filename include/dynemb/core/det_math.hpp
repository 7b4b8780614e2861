// Float arithmetic that rounds identically on the host and on CUDA devices: each operation is
// a single IEEE-rounded op (no contraction into FMA unless written as fma), and log / sin / cos
// are our own polynomials built from those ops. Used by the initializers so a row is
// bit-identical on CPU and GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "dynemb/core/host_device.hpp"

namespace dynemb::det {

DYNEMB_HD float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

DYNEMB_HD float add(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}

DYNEMB_HD float sub(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

DYNEMB_HD float div(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

DYNEMB_HD float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

DYNEMB_HD float sqrt(float a) {
#if defined(__CUDA_ARCH__)
  return __fsqrt_rn(a);
#else
  return std::sqrt(a);
#endif
}

DYNEMB_HD uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

DYNEMB_HD float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

// Natural logarithm of a positive, finite, normal x (cephes' logf polynomial; ~1 ulp).
DYNEMB_HD float log(float x) {
  const uint32_t bits = float_bits(x);
  int e = static_cast<int>((bits >> 23) & 0xFF) - 126;
  float m = bits_float((bits & 0x007FFFFFu) | 0x3F000000u);  // [0.5, 1)
  if (m < 0.707106781186547524f) {
    e -= 1;
    m = sub(add(m, m), 1.0f);
  } else {
    m = sub(m, 1.0f);
  }
  const float z = mul(m, m);
  float p = 7.0376836292e-2f;
  p = fma(p, m, -1.1514610310e-1f);
  p = fma(p, m, 1.1676998740e-1f);
  p = fma(p, m, -1.2420140846e-1f);
  p = fma(p, m, 1.4249322787e-1f);
  p = fma(p, m, -1.6668057665e-1f);
  p = fma(p, m, 2.0000714765e-1f);
  p = fma(p, m, -2.4999993993e-1f);
  p = fma(p, m, 3.3333331174e-1f);
  float y = mul(mul(p, m), z);
  const float fe = static_cast<float>(e);
  y = fma(fe, -2.12194440e-4f, y);
  y = fma(-0.5f, z, y);
  float r = add(m, y);
  r = fma(fe, 0.693359375f, r);
  return r;
}

// sin(2*pi*u) and cos(2*pi*u) for u in [0, 1) that is a multiple of 2^-24.
DYNEMB_HD void sincos_2pi(float u, float* s, float* c) {
  const float v = mul(u, 4.0f);                         // exact
  const int quarter = static_cast<int>(add(v, 0.5f));   // nearest quarter turn (v >= 0)
  const float r = sub(v, static_cast<float>(quarter));  // [-0.5, 0.5], exact
  const float a = mul(r, 1.57079632679489662f);
  const float z = mul(a, a);
  float sp = -1.9515295891e-4f;
  sp = fma(sp, z, 8.3321608736e-3f);
  sp = fma(sp, z, -1.6666654611e-1f);
  const float sa = fma(mul(sp, z), a, a);
  float cp = 2.443315711809948e-5f;
  cp = fma(cp, z, -1.388731625493765e-3f);
  cp = fma(cp, z, 4.166664568298827e-2f);
  const float ca = add(fma(mul(cp, z), z, mul(-0.5f, z)), 1.0f);
  switch (quarter & 3) {
    case 0:
      *s = sa;
      *c = ca;
      break;
    case 1:
      *s = ca;
      *c = -sa;
      break;
    case 2:
      *s = -sa;
      *c = -ca;
      break;
    default:
      *s = -ca;
      *c = sa;
      break;
  }
}

}  // namespace dynemb::det
