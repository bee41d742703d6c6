// Storage-type rounding: exhaustive round trips and the edge cases of round-to-nearest-even.
#include <doctest/doctest.h>

#include <cmath>
#include <limits>

#include "core/dtype.hpp"

using namespace fa;

TEST_CASE("fp16: every non-NaN bit pattern survives a round trip through float") {
  int checked = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const bool nan = ((h >> 10) & 0x1f) == 0x1f && (h & 0x3ff);
    if (nan) continue;
    REQUIRE(float_to_half_bits(half_bits_to_float(uint16_t(h))) == h);
    ++checked;
  }
  CHECK(checked == 63490);  // 65536 minus 2·1023 NaN patterns
}

TEST_CASE("bf16: every non-NaN bit pattern survives a round trip through float") {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const bool nan = ((b >> 7) & 0xff) == 0xff && (b & 0x7f);
    if (nan) continue;
    REQUIRE(float_to_bf16_bits(bf16_bits_to_float(uint16_t(b))) == b);
  }
}

TEST_CASE("fp16: known values, ties to even, subnormals, overflow, NaN") {
  CHECK(float_to_half_bits(1.0f) == 0x3c00);
  CHECK(float_to_half_bits(-2.0f) == 0xc000);
  CHECK(float_to_half_bits(65504.0f) == 0x7bff);          // largest finite
  CHECK(float_to_half_bits(65519.0f) == 0x7bff);          // still rounds down
  CHECK(float_to_half_bits(65520.0f) == 0x7c00);          // rounds to +inf
  CHECK(float_to_half_bits(0x1p-24f) == 0x0001);          // smallest subnormal
  CHECK(float_to_half_bits(0x1p-25f) == 0x0000);          // a tie: rounds to even (zero)
  CHECK(float_to_half_bits(0x1.8p-25f) == 0x0001);        // above the tie
  CHECK(float_to_half_bits(1.0f + 0x1p-11f) == 0x3c00);   // tie between 1 and 1+2^-10: even is 1
  CHECK(float_to_half_bits(1.0f + 0x1.8p-10f) == 0x3c02); // tie between 1+2^-10 and 1+2^-9: even is 0x3c02
  CHECK(float_to_half_bits(0x1.ffcp-15f) == 0x0400);      // rounds up into the smallest normal
  CHECK(std::isnan(half_bits_to_float(float_to_half_bits(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(double(round_to(DType::f16, 0.1f)) == 0.0999755859375);  // 0x2e66
}

TEST_CASE("bf16: known values and ties to even") {
  CHECK(float_to_bf16_bits(1.0f) == 0x3f80);
  CHECK(float_to_bf16_bits(1.0f + 0x1p-8f) == 0x3f80);    // tie: even
  CHECK(float_to_bf16_bits(1.0f + 0x1.8p-7f) == 0x3f82);  // tie: even is up
  CHECK(float_to_bf16_bits(1.0f + 0x1.01p-8f) == 0x3f81); // above the tie
  CHECK(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(unit_roundoff(DType::bf16) == 0x1p-8);
  CHECK(unit_roundoff(DType::f16) == 0x1p-11);
}
