//===- ReduceBF16Test.cpp - The reduce dtype bf16's sum --------------------===//
//
// host::addBF16, the sum every bf16 reduction runs (the MPI_Op of the MPI
// collectives, gloo's reduce function and ring): the exact sum rounded to
// bf16 (nearest, ties to even), commutative, NaN and inf as IEEE says.
//
//===----------------------------------------------------------------------===//
#include "mfsdp/runtime/Kernels.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace mfsdp::rt;

namespace {

float bitsToFloat(uint16_t b) { return host::fromBF16(b); }

uint16_t floatBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return static_cast<uint16_t>(u >> 16); // f must be a bf16 value
}

bool isNaN(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x007fu); }

/// x (exact in double) rounded to the nearest bf16, ties to even, from the
/// definition: 8 significant bits, subnormals spaced 2^-133, past the
/// largest finite value (2 - 2^-7) * 2^127 by half its spacing or more: inf.
uint16_t referenceRound(double x) {
  if (x == 0)
    return std::signbit(x) ? 0x8000u : 0;
  int k = 0;
  std::frexp(x, &k); // |x| = m * 2^k, m in [0.5, 1)
  const double spacing = std::ldexp(1.0, std::max(k - 8, -133));
  const double q = std::nearbyint(x / spacing) * spacing; // ties to even
  const double largest = std::ldexp(2.0 - std::ldexp(1.0, -7), 127);
  if (std::fabs(q) > largest)
    return q > 0 ? 0x7f80u : 0xff80u;
  return floatBits(static_cast<float>(q));
}

/// A random bf16 bit pattern: finite, either sign, any exponent.
uint16_t randomFinite(std::mt19937 &rng) {
  for (;;) {
    const uint16_t b = static_cast<uint16_t>(rng() & 0xffffu);
    if ((b & 0x7f80u) != 0x7f80u)
      return b;
  }
}

} // namespace

TEST(ReduceBF16, SumIsTheExactSumRoundedToNearestEven) {
  ASSERT_EQ(std::fegetround(), FE_TONEAREST);
  std::mt19937 rng(12);
  // Every finite bf16 value against 300 random ones, and pairs whose
  // exponents are close (where fp32 sums are exact and the rounding does
  // all the work) or far apart (where the fp32 sum rounds first).
  std::vector<uint16_t> others;
  for (int i = 0; i < 300; ++i)
    others.push_back(randomFinite(rng));
  int64_t checked = 0;
  for (uint32_t a = 0; a < 0x10000u; ++a) {
    if ((a & 0x7f80u) == 0x7f80u)
      continue;
    for (uint16_t b : others) {
      const double exact = double(bitsToFloat(uint16_t(a))) + double(bitsToFloat(b));
      const uint16_t got = host::addBF16(uint16_t(a), b);
      const uint16_t want = referenceRound(exact);
      if (exact == 0) {
        ASSERT_EQ(got & 0x7fffu, 0u) << std::hex << a << " + " << b;
        continue; // the sign of a zero sum follows IEEE's rules, not checked
      }
      ASSERT_EQ(got, want) << std::hex << "0x" << a << " + 0x" << b << " = " << exact;
      ++checked;
    }
  }
  for (int i = 0; i < 200000; ++i) {
    const uint16_t a = randomFinite(rng);
    // b within 20 binades of a: exponent fields differing by 0..20.
    const int shift = static_cast<int>(rng() % 21);
    const int expo = static_cast<int>((a >> 7) & 0xff) - shift;
    if (expo <= 0)
      continue;
    const uint16_t b = static_cast<uint16_t>((rng() & 0x8000u) | (uint32_t(expo) << 7) |
                                             (rng() & 0x7fu));
    const double exact = double(bitsToFloat(a)) + double(bitsToFloat(b));
    if (exact == 0)
      continue;
    ASSERT_EQ(host::addBF16(a, b), referenceRound(exact))
        << std::hex << "0x" << a << " + 0x" << b;
    ++checked;
  }
  EXPECT_GT(checked, 10000000);
}

TEST(ReduceBF16, TiesGoToEven) {
  const uint16_t one = floatBits(1.0f);
  const uint16_t halfUlp = floatBits(std::ldexp(1.0f, -8)); // half of 1's ulp 2^-7
  // 1 + 2^-8 lies halfway between 1 and 1 + 2^-7: to 1 (even mantissa).
  EXPECT_EQ(host::addBF16(one, halfUlp), one);
  // (1 + 2^-7) + 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6.
  const uint16_t oneUlp = floatBits(1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(host::addBF16(oneUlp, halfUlp), floatBits(1.0f + std::ldexp(1.0f, -6)));
  // Just above the tie rounds up: 1 + 2^-8 + 2^-16 is no bf16 operand, but
  // 1 + (2^-8 + 2^-15) is (2^-8 + 2^-15 has 8 significant bits).
  const uint16_t aboveHalf = floatBits(std::ldexp(1.0f, -8) + std::ldexp(1.0f, -15));
  EXPECT_EQ(host::addBF16(one, aboveHalf), oneUlp);
}

TEST(ReduceBF16, Commutative) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint16_t a = static_cast<uint16_t>(rng()), b = static_cast<uint16_t>(rng());
    const uint16_t ab = host::addBF16(a, b), ba = host::addBF16(b, a);
    if (isNaN(ab) || isNaN(ba))
      ASSERT_TRUE(isNaN(ab) && isNaN(ba)) << std::hex << a << " " << b;
    else
      ASSERT_EQ(ab, ba) << std::hex << a << " " << b;
  }
}

TEST(ReduceBF16, NaNAndInfinity) {
  const uint16_t inf = 0x7f80u, minusInf = 0xff80u, nan = 0x7fc0u;
  const uint16_t one = floatBits(1.0f), largest = 0x7f7fu; // (2 - 2^-7) * 2^127
  EXPECT_TRUE(isNaN(host::addBF16(nan, one)));
  EXPECT_TRUE(isNaN(host::addBF16(one, nan)));
  EXPECT_TRUE(isNaN(host::addBF16(0x7f81u, one))); // a signalling NaN stays NaN
  EXPECT_TRUE(isNaN(host::addBF16(inf, minusInf)));
  EXPECT_EQ(host::addBF16(inf, one), inf);
  EXPECT_EQ(host::addBF16(minusInf, largest), minusInf);
  // Past the largest finite value: inf (the fp32 sum is finite there).
  EXPECT_EQ(host::addBF16(largest, largest), inf);
  EXPECT_EQ(host::addBF16(largest | 0x8000u, largest | 0x8000u), minusInf);
  // Half an ulp above the largest is a tie, to even: inf.
  EXPECT_EQ(host::addBF16(largest, floatBits(std::ldexp(1.0f, 119))), inf);
  // Subnormals add exactly.
  EXPECT_EQ(host::addBF16(0x0001u, 0x0001u), 0x0002u);
  EXPECT_EQ(host::addBF16(0x007fu, 0x0001u), 0x0080u); // into the normals
}

TEST(ReduceBF16, SumIsElementwiseAdd) {
  std::mt19937 rng(3);
  std::vector<uint16_t> in(1000), inout(1000), want(1000);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = randomFinite(rng);
    inout[i] = randomFinite(rng);
    want[i] = host::addBF16(in[i], inout[i]);
  }
  host::sumBF16(in.data(), inout.data(), static_cast<int64_t>(in.size()));
  EXPECT_EQ(inout, want);
}
