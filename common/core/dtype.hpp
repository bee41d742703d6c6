// Storage types and their rounding, on the host.
//
// Q, K, V, P and O are stored in fp16 or bf16; arithmetic accumulates in fp32. The CPU side keeps
// tensors as float values that are *already rounded* to the storage type, so the Eigen reference
// and the blueprints see exactly the numbers the GPU sees. These conversions are plain C++ (no CUDA
// headers) and round to nearest, ties to even, like __float2half_rn and __float2bfloat16_rn.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

namespace fa {

enum class DType { f16, bf16 };

inline const char* dtype_name(DType t) { return t == DType::f16 ? "fp16" : "bf16"; }
inline constexpr int dtype_bytes(DType) { return 2; }

// Unit roundoff u = 2^-(p) for a p+1-bit significand: |round(x) - x| <= u |x| for normal x.
inline double unit_roundoff(DType t) { return t == DType::f16 ? 0x1p-11 : 0x1p-8; }
// Below the smallest normal number the spacing stops shrinking: rounding then costs up to half of
// the smallest subnormal absolutely, whatever the value (fp16: 2^-24 ≈ 5.96e-8; bf16: 2^-133). A
// result under that spacing may be stored as 0 (or −0): its whole value is rounding error.
inline double subnormal_spacing(DType t) { return t == DType::f16 ? 0x1p-24 : 0x1p-133; }

inline uint32_t float_bits(float f) { uint32_t x; std::memcpy(&x, &f, 4); return x; }
inline float bits_float(uint32_t x) { float f; std::memcpy(&f, &x, 4); return f; }

inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u;            // NaN stays NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;           // >= 65520 rounds to infinity
  if (a >= 0x38800000u) {                                // normal half: |f| >= 2^-14
    uint32_t h = ((((a >> 23) - 127u + 15u)) << 10) | ((a & 0x7fffffu) >> 13);
    const uint32_t rest = a & 0x1fffu;                   // the 13 bits that are dropped
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // carry may reach the exponent: fine
    return static_cast<uint16_t>(sign | h);
  }
  // Subnormal half (or zero): units of 2^-24. Scaling by 2^24 is exact; nearbyint rounds to even.
  const float q = bits_float(a) * 16777216.0f;
  return static_cast<uint16_t>(sign | static_cast<uint32_t>(std::nearbyint(q)));
}

inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = static_cast<float>(m) * 0x1p-24f;
    return sign ? -v : v;
  }
  if (e == 31) return bits_float(sign | 0x7f800000u | (m << 13));
  return bits_float(sign | ((e - 15u + 127u) << 23) | (m << 13));
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

inline float bf16_bits_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

inline uint16_t to_bits(DType t, float f) {
  return t == DType::f16 ? float_to_half_bits(f) : float_to_bf16_bits(f);
}
inline float from_bits(DType t, uint16_t b) {
  return t == DType::f16 ? half_bits_to_float(b) : bf16_bits_to_float(b);
}
// The value a float becomes when stored in the storage type.
inline float round_to(DType t, float f) { return from_bits(t, to_bits(t, f)); }

// [e4m3] FP8 E4M3 (OCP's, what Hopper's FP8 tensor cores take; step 21): a sign, 4 exponent bits
// (bias 7), 3 mantissa bits. 1.mmm·2^(e−7) for e = 1 … 15, m·2^-9 for e = 0 (subnormals); no
// infinity; S.1111.111 is NaN, so the largest value is 1.110·2^8 = 448. Rounding to nearest loses at
// most 2^-4 relatively in the normal range (|x| >= 2^-6), at most 2^-10 absolutely below it.
// This conversion is cvt.rn.satfinite.e4m3x2.f32's: ties to even, |x| > 448 saturates to ±448, NaN
// gives the NaN code.
inline constexpr float kE4m3Max = 448.0f;
inline constexpr double kE4m3UnitRoundoff = 0x1p-4;
inline uint8_t float_to_e4m3_bits(float f) {
  const uint32_t x = float_bits(f);
  const uint8_t sign = static_cast<uint8_t>((x >> 24) & 0x80u);
  const uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  if (a >= 0x43e00000u) return static_cast<uint8_t>(sign | 0x7eu);   // >= 448 (and inf): satfinite
  if (a < 0x3c800000u) {  // below 2^-6: units of 2^-9 (code 8 is 2^-6, the smallest normal: the carry is right)
    const float q = bits_float(a) * 512.0f;  // exact; nearbyint rounds to even
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(q)));
  }
  uint32_t c = ((((a >> 23) - 127u + 7u)) << 3) | ((a & 0x7fffffu) >> 20);
  const uint32_t rest = a & 0xfffffu;  // the 20 bits dropped
  if (rest > 0x80000u || (rest == 0x80000u && (c & 1u))) ++c;  // below 448, so at most 0x7e
  return static_cast<uint8_t>(sign | c);
}
inline float e4m3_bits_to_float(uint8_t b) {
  const float s = (b & 0x80u) ? -1.0f : 1.0f;
  const uint32_t e = (b >> 3) & 0xfu, m = b & 7u;
  if (e == 15 && m == 7) return std::nanf("");
  if (e == 0) return s * static_cast<float>(m) * 0x1p-9f;
  return s * std::ldexp(1.0f + static_cast<float>(m) / 8.0f, int(e) - 7);
}
inline float round_to_e4m3(float f) { return e4m3_bits_to_float(float_to_e4m3_bits(f)); }

}  // namespace fa
