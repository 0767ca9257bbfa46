// Host emulation of <cuda_bf16.h> for tensorize's CUDA backend: __nv_bfloat16 is the top 16
// bits of an IEEE binary32, converted from float with round-to-nearest-even (NaN kept quiet),
// to float exactly; arithmetic goes through float, as the reference executor's does.
#pragma once
#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t bits;
  __nv_bfloat16() = default;
  __nv_bfloat16(float value) {
    uint32_t word;
    std::memcpy(&word, &value, 4);
    if ((word & 0x7fffffffu) > 0x7f800000u) {
      bits = uint16_t((word >> 16) | 0x40u);
    } else {
      bits = uint16_t((word + 0x7fffu + ((word >> 16) & 1u)) >> 16);
    }
  }
  operator float() const {
    uint32_t word = uint32_t(bits) << 16;
    float value;
    std::memcpy(&value, &word, 4);
    return value;
  }
};
typedef __nv_bfloat16 nv_bfloat16;
