// Storage-type rounding: exhaustive round trips and the edge cases of round-to-nearest-even.
#include <doctest/doctest.h>

#include <algorithm>
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

// [e4m3] Every code from its bits by the format's definition, not by the decoder under test.
namespace {
double e4m3_by_definition(uint32_t code) {
  const uint32_t e = (code >> 3) & 0xf, m = code & 7;
  const double mag = e == 0 ? m * std::ldexp(1.0, -9) : (1.0 + m / 8.0) * std::ldexp(1.0, int(e) - 7);
  return (code & 0x80) ? -mag : mag;
}
bool e4m3_nan(uint32_t code) { return (code & 0x7f) == 0x7f; }
}  // namespace

TEST_CASE("e4m3: every code decodes to its definition and survives a round trip, and 448 is the largest") {
  int codes = 0;
  double largest = 0;
  for (uint32_t c = 0; c < 0x100u; ++c) {
    if (e4m3_nan(c)) {
      CHECK(std::isnan(e4m3_bits_to_float(uint8_t(c))));
      continue;
    }
    CAPTURE(c);
    const double want = e4m3_by_definition(c);
    REQUIRE(double(e4m3_bits_to_float(uint8_t(c))) == want);
    // -0 encodes as 0x80, +0 as 0x00: the round trip keeps the sign
    REQUIRE(float_to_e4m3_bits(float(want)) == c);
    largest = std::max(largest, want);
    ++codes;
  }
  CHECK(codes == 256 - 2);  // two NaN codes, one per sign
  CHECK(largest == double(kE4m3Max));
}

TEST_CASE("e4m3: every midpoint between neighbours rounds to the even code, beyond 448 saturates, NaN stays NaN") {
  for (uint32_t c = 0; c + 1 < 0x7fu; ++c) {  // neighbours c, c + 1 among the positive finite codes
    const double lo = e4m3_by_definition(c), hi = e4m3_by_definition(c + 1), mid = (lo + hi) / 2;
    CAPTURE(c);
    REQUIRE(float(mid) == mid);  // the midpoint is a float: the test is of the tie itself
    CHECK(float_to_e4m3_bits(float(mid)) == ((c % 2 == 0) ? c : c + 1));
    CHECK(float_to_e4m3_bits(float(mid) * (1 + 0x1p-20f)) == c + 1);  // just above: up
    CHECK(float_to_e4m3_bits(float(mid) * (1 - 0x1p-20f)) == c);      // just below: down
    CHECK(float_to_e4m3_bits(-float(mid)) == (0x80u | ((c % 2 == 0) ? c : c + 1)));
  }
  CHECK(float_to_e4m3_bits(449.0f) == 0x7e);
  CHECK(float_to_e4m3_bits(1e30f) == 0x7e);
  CHECK(float_to_e4m3_bits(-std::numeric_limits<float>::infinity()) == 0xfe);
  CHECK(float_to_e4m3_bits(0x1p-11f) == 0x00);  // a quarter of the smallest subnormal: zero
  CHECK(e4m3_nan(float_to_e4m3_bits(std::numeric_limits<float>::quiet_NaN())));
}

TEST_CASE("e4m3: the relative error is at most 2^-4 in the normal range, and reached") {
  double worst = 0;
  for (float x = 0x1p-6f; x < kE4m3Max; x *= 1.0009765625f) {  // 2^-6 … 448 in steps of 2^-10
    const double r = std::fabs(double(round_to_e4m3(x)) - x) / x;
    REQUIRE(r <= kE4m3UnitRoundoff);
    worst = std::max(worst, r);
  }
  // the supremum is u / (1 + u), at the midpoint above a power of two (1 + 2^-4 between 1 and 1.125)
  CHECK(worst > 0.99 * kE4m3UnitRoundoff / (1 + kE4m3UnitRoundoff));
}
