// Counter-based Philox 4x32-10 (Salmon et al., SC'11). Element i of a
// random tensor drawn at generator offset `off` uses the block
// philox(key = seed, counter = off + i) — one 4-word block per element — so
// any device computes element i independently and identically:
//   uniform f32: w0 >> 8 scaled by 2^-24           -> [0, 1)
//   uniform f64: (w0 << 21 ^ w1 >> 11) scaled by 2^-53 -> [0, 1)
//   normal:      Box-Muller on u1 = (w0,w1), u2 = (w2,w3) as f64 uniforms,
//                sqrt(-2 ln(1 - u1)) cos(2 pi u2), rounded to the dtype.
// Each draw advances the global offset by numel.
#pragma once

#include <cstdint>

#ifndef TG_HOST_DEVICE
#if defined(__CUDACC__)
#define TG_HOST_DEVICE __host__ __device__
#else
#define TG_HOST_DEVICE
#endif
#endif

namespace tg {

/// Four 32-bit random words of one Philox counter.
struct PhiloxBlock {
  uint32_t w[4];  ///< the words
};

/// Philox 4x32-10: four random words for counter `ctr` of stream `seed`.
TG_HOST_DEVICE inline PhiloxBlock philox4x32_10(uint64_t seed, uint64_t ctr) {
  uint32_t c0 = uint32_t(ctr), c1 = uint32_t(ctr >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r) {
    uint64_t p0 = uint64_t(0xD2511F53u) * c0;
    uint64_t p1 = uint64_t(0xCD9E8D57u) * c2;
    uint32_t n0 = uint32_t(p1 >> 32) ^ c1 ^ k0;
    uint32_t n2 = uint32_t(p0 >> 32) ^ c3 ^ k1;
    c1 = uint32_t(p1);
    c3 = uint32_t(p0);
    c0 = n0;
    c2 = n2;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {{c0, c1, c2, c3}};
}

/// A double uniform in [0, 1) from two words (53 bits).
TG_HOST_DEVICE inline double philox_u53(uint32_t a, uint32_t b) {
  uint64_t x = (uint64_t(a) << 21) ^ (uint64_t(b) >> 11);
  return double(x & ((uint64_t(1) << 53) - 1)) * (1.0 / 9007199254740992.0);
}
/// A float uniform in [0, 1) from one word (24 bits).
TG_HOST_DEVICE inline float philox_u24(uint32_t a) { return float(a >> 8) * (1.0f / 16777216.0f); }

/// Where a reservation of the global generator starts.
struct PhiloxState {
  uint64_t seed;    ///< the generator seed
  uint64_t offset;  ///< the first reserved counter
};
/// Reserves `n` counters of the global generator; returns where they start.
PhiloxState philox_reserve(uint64_t n);
/// The seed manual_seed() set (a fixed default otherwise).
uint64_t default_seed();

}  // namespace tg
