// Host emulation of <cuda_fp8.h> for tensorize's CUDA backend: __nv_fp8_e4m3 and
// __nv_fp8_e5m2 hold their 8 bits (`__x`, as CUDA's do) and convert to float exactly. The
// kernels only move them and hand them to mma.sync, so no conversion from float is defined:
// a kernel that needs one fails to build here rather than round differently from a GPU.
#pragma once
#include <cstdint>
#include <cmath>

namespace tz {
// The value of an 8-bit float with `mantissa` fraction bits and exponent bias `bias`.
// e4m3 (FN: no infinity) has one NaN, S.1111.111; e5m2 has IEEE infinities and NaNs.
inline float fp8_value(uint8_t bits, int mantissa, int bias, bool ieee_specials) {
  const int exponent_bits = 7 - mantissa;
  const int exponent = (bits >> mantissa) & ((1 << exponent_bits) - 1);
  const int fraction = bits & ((1 << mantissa) - 1);
  const float sign = (bits & 0x80) ? -1.0f : 1.0f;
  const int top = (1 << exponent_bits) - 1;
  if (ieee_specials && exponent == top)
    return fraction ? NAN : sign * INFINITY;
  if (!ieee_specials && exponent == top && fraction == (1 << mantissa) - 1) return NAN;
  if (exponent == 0) return sign * std::ldexp(float(fraction), 1 - bias - mantissa);
  return sign * std::ldexp(float(fraction | (1 << mantissa)), exponent - bias - mantissa);
}
}  // namespace tz

struct __nv_fp8_e4m3 {
  uint8_t __x;
  operator float() const { return tz::fp8_value(__x, 3, 7, false); }
};
struct __nv_fp8_e5m2 {
  uint8_t __x;
  operator float() const { return tz::fp8_value(__x, 2, 15, true); }
};
