// Shared by the fuzz targets: reading fields from an input, and reporting a
// finding (abort, so that the driver and libFuzzer both stop on it).
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tgfuzz {

[[noreturn]] inline void finding(const char* target, const char* what) {
  std::fprintf(stderr, "%s: finding: %s\n", target, what);
  std::abort();
}

// Fields in order; past the end of the input they read as zero.
struct Reader {
  const uint8_t* p;
  size_t n;
  template <class T> T get() {
    T v{};
    const size_t k = n < sizeof(T) ? n : sizeof(T);
    std::memcpy(&v, p, k);
    p += k;
    n -= k;
    return v;
  }
};

}  // namespace tgfuzz
