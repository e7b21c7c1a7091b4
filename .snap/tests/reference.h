// Test helpers: an independent double-precision view of any tensor (read
// straight from storage through sizes/strides/offset, not through the
// library's kernels) and operand layouts for the op tests.
#pragma once

#include <algorithm>
#include <cstdlib>

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include <tapegrad/tapegrad.h>

namespace tgtest {

// The tg::Error fn throws, or "no error".
template <class F> std::string error_message(F&& fn) {
  try {
    fn();
  } catch (const tg::Error& e) {
    return e.what();
  }
  return "no error";
}

using tg::IntList;
using tg::ScalarType;
using tg::Tensor;

inline double read_element(const Tensor& t, int64_t elem_offset) {
  const char* base = static_cast<const char*>(t.impl()->storage()->data());
  size_t esz = tg::element_size(t.dtype());
  const char* p = base + size_t(elem_offset) * esz;
  switch (t.dtype()) {
    case ScalarType::Float32: return *reinterpret_cast<const float*>(p);
    case ScalarType::Float64: return *reinterpret_cast<const double*>(p);
    case ScalarType::BFloat16: return tg::bf16_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
    case ScalarType::Float16: return tg::half_bits_to_float(*reinterpret_cast<const uint16_t*>(p));
    case ScalarType::Int64: return double(*reinterpret_cast<const int64_t*>(p));
    case ScalarType::Bool: return *reinterpret_cast<const bool*>(p) ? 1.0 : 0.0;
    case ScalarType::Complex64:
    case ScalarType::Complex128: break;
  }
  throw tg::Error("read_element: a complex tensor (compare view_as_real(t))");
}

// Row-major values of t, read through its strides (a GPU tensor is copied to
// the host first).
inline std::vector<double> values(const Tensor& t) {
  if (t.is_cuda()) return values(t.to(tg::Device(tg::kCPU)));
  std::vector<double> out;
  out.reserve(size_t(t.numel()));
  if (t.numel() == 0) return out;
  int64_t idx[32] = {};  // a fixed array: GCC 13 misreports a vector here
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = t.storage_offset();
    for (int64_t d = 0; d < t.dim(); ++d)
      off += idx[d] * t.strides()[size_t(d)];
    out.push_back(read_element(t, off));
    for (int64_t d = t.dim() - 1; d >= 0; --d) {
      if (++idx[d] < t.sizes()[size_t(d)]) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Multi-index -> row-major position with NumPy broadcasting from `from` to `to`.
inline int64_t broadcast_pos(int64_t linear, const IntList& to, const IntList& from) {
  int64_t pos = 0, stride = 1;
  int64_t rem = linear;
  std::vector<int64_t> idx(to.size());
  for (int64_t d = int64_t(to.size()) - 1; d >= 0; --d) {
    idx[size_t(d)] = rem % to[size_t(d)];
    rem /= to[size_t(d)];
  }
  for (int64_t d = int64_t(from.size()) - 1; d >= 0; --d) {
    int64_t td = d + int64_t(to.size() - from.size());
    int64_t i = from[size_t(d)] == 1 ? 0 : idx[size_t(td)];
    pos += i * stride;
    stride *= from[size_t(d)];
  }
  return pos;
}

// Tolerance for a result stored in dtype t.
inline double tol_for(ScalarType t) {
  switch (t) {
    case ScalarType::Float32: return 2e-5;
    case ScalarType::Float64: return 1e-12;
    case ScalarType::BFloat16: return 1.6e-2;
    case ScalarType::Float16: return 2e-3;
    default: return 0;
  }
}

inline void expect_values(const Tensor& actual, const std::vector<double>& expected, double tol,
                          const std::string& what) {
  std::vector<double> got = values(actual);
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    double e = expected[i], g = got[i];
    if (std::isnan(e)) {
      EXPECT_TRUE(std::isnan(g)) << what << " at " << i;
      continue;
    }
    if (std::isinf(e)) {
      EXPECT_EQ(g, e) << what << " at " << i;
      continue;
    }
    EXPECT_NEAR(g, e, tol * (1 + std::fabs(e))) << what << " at " << i;
    if (std::fabs(g - e) > tol * (1 + std::fabs(e))) return;  // one report is enough
  }
}

enum class Layout { Contiguous, Transposed, Stepped, Expanded };
inline const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous: return "contiguous";
    case Layout::Transposed: return "transposed";
    case Layout::Stepped: return "sliced with step";
    case Layout::Expanded: return "expanded";
  }
  return "?";
}
constexpr Layout kLayouts[] = {Layout::Contiguous, Layout::Transposed, Layout::Stepped, Layout::Expanded};

// A tensor of the given sizes (rank >= 2) and dtype in the given layout,
// with values drawn from `gen` (uniform in [lo, hi) by default).
inline Tensor make(const IntList& sizes, ScalarType dt, Layout l, double lo = -2, double hi = 2) {
  auto draw = [&](const IntList& s) {
    Tensor u = tg::rand(s, tg::kFloat64) * (hi - lo) + lo;
    if (dt == ScalarType::Int64) u = tg::clamp(u * 2.0, -9, 9).to(tg::kInt64).to(tg::kFloat64);
    if (dt == ScalarType::Bool) u = tg::gt(u, (lo + hi) / 2).to(tg::kFloat64);
    return u.to(dt);
  };
  int64_t n = int64_t(sizes.size());
  switch (l) {
    case Layout::Contiguous: return draw(sizes);
    case Layout::Transposed: {
      IntList s = sizes;
      std::swap(s[size_t(n - 1)], s[size_t(n - 2)]);
      Tensor t = draw(s).transpose(n - 1, n - 2);
      EXPECT_FALSE(t.is_contiguous() && t.numel() > 1 && sizes[size_t(n - 1)] > 1 && sizes[size_t(n - 2)] > 1);
      return t;
    }
    case Layout::Stepped: {
      IntList s = sizes;
      s[size_t(n - 1)] = 2 * sizes[size_t(n - 1)] + 1;
      return draw(s).slice(n - 1, 1, std::nullopt, 2);
    }
    case Layout::Expanded: {
      IntList s = sizes;
      s[0] = 1;
      return draw(s).expand(sizes);
    }
  }
  return {};
}

// Replay counts of the graph tests; scripts/gpu.sh lowers them under
// compute-sanitizer (TG_TEST_MAX_REPLAYS), whose racecheck would take hours
// over the full counts.
inline int replays(int n) {
  const char* cap = std::getenv("TG_TEST_MAX_REPLAYS");
  return cap ? std::min(n, std::atoi(cap)) : n;
}

// `f()` throws a tg::Error whose message contains one of `texts` (calls
// whose message depends on how the library was built or what the machine has).
template <class F> void expect_error_containing_one_of(F&& f, std::initializer_list<const char*> texts) {
  try {
    f();
    ADD_FAILURE() << "expected an error";
  } catch (const tg::Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(std::any_of(texts.begin(), texts.end(), [&](const char* t) { return m.find(t) != std::string::npos; }))
        << m;
  }
}

constexpr ScalarType kFloatTypes[] = {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16};
constexpr ScalarType kAllTypes[] = {tg::kFloat32, tg::kFloat64, tg::kBFloat16, tg::kFloat16, tg::kInt64, tg::kBool};

}  // namespace tgtest

// GPU tests: skip with a message where there is no GPU (they must run on the
// GPU machine).
#define REQUIRE_GPU()                                                                            \
  if (!tg::cuda::is_available())                                                                 \
  GTEST_SKIP() << "no CUDA GPU here (built with CUDA: " << (tg::cuda::is_built() ? "yes" : "no") \
               << "); this test runs on the GPU machine"

// PyTorch's capture recipe: `warmups` calls of `step` on a side stream (what
// a capture may not create: library handles, cached blocks), then one call
// captured into `graph`; returns that call's result (the graph's outputs).
template <class Step> auto capture_after_warmup(tg::cuda::CUDAGraph& graph, Step&& step, int warmups = 2) {
  namespace cu = tg::cuda;
  cu::Stream side = cu::stream_from_pool();
  side.wait_stream(cu::current_stream());
  {
    cu::StreamGuard guard(side);
    for (int i = 0; i < warmups; ++i)
      step();
  }
  cu::current_stream().wait_stream(side);
  cu::Graph capture(graph);
  EXPECT_TRUE(cu::is_current_stream_capturing());
  return step();
}

// `stmt` throws a tg::Error whose message contains `text` (test_errors.cpp
// checks message prefixes with its own EXPECT_ERROR).
#define EXPECT_ERROR_CONTAINS(stmt, text)                                  \
  do {                                                                     \
    bool thrown = false;                                                   \
    try {                                                                  \
      (void)(stmt);                                                        \
    } catch (const tg::Error& e) {                                         \
      thrown = true;                                                       \
      EXPECT_NE(std::string(e.what()).find(text), std::string::npos)       \
          << "message: " << e.what() << "\nexpected to contain: " << text; \
    }                                                                      \
    EXPECT_TRUE(thrown) << #stmt " did not throw";                         \
  } while (0)
