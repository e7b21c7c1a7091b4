#include "tensor/cpu/loops.h"

#include "tensor/env.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/task_arena.h>

namespace tg::cpu {
namespace {

struct Plan {
  int ndim = 0;  // dim 0 is the innermost
  int nops = 0;
  int64_t shape[kMaxDims];
  int64_t strides[kMaxDims][kMaxOps];  // bytes
  char* base[kMaxOps];
};

Plan make_plan(const Tensor* ops, int nops) {
  Plan p;
  p.nops = nops;
  const Tensor& out = ops[0];
  int nd = int(out.dim());
  TG_CHECK(nd <= kMaxDims, "elementwise: tensors of rank ", nd, " are not supported (at most ", kMaxDims, ")");
  for (int k = 0; k < nops; ++k) {
    TG_INTERNAL_ASSERT(ops[k].sizes() == out.sizes(), "operand ", k, " has shape ", shape_str(ops[k].sizes()), " not ",
                       shape_str(out.sizes()));
    p.base[k] = static_cast<char*>(ops[k].data_ptr());
  }
  // Collect non-trivial dims, innermost first.
  int perm[kMaxDims];
  int n = 0;
  for (int d = nd - 1; d >= 0; --d)
    if (out.sizes()[d] != 1) perm[n++] = d;
  // Stable insertion sort by the output's |stride| so the loop walks the
  // output in memory order (matters for permuted in-place destinations).
  auto key = [&](int d) {
    int64_t s = out.strides()[d];
    return s < 0 ? -s : s;
  };
  for (int i = 1; i < n; ++i) {
    int d = perm[i];
    int j = i;
    while (j > 0 && key(perm[j - 1]) > key(d)) {
      perm[j] = perm[j - 1];
      --j;
    }
    perm[j] = d;
  }
  int m = 0;
  for (int i = 0; i < n; ++i) {
    int d = perm[i];
    int64_t size = out.sizes()[d];
    if (m > 0) {  // coalesce with the previous (inner) dim when possible
      bool ok = true;
      for (int k = 0; k < nops && ok; ++k)
        ok = ops[k].strides()[d] * int64_t(element_size(ops[k].dtype())) == p.strides[m - 1][k] * p.shape[m - 1];
      if (ok) {
        p.shape[m - 1] *= size;
        continue;
      }
    }
    p.shape[m] = size;
    for (int k = 0; k < nops; ++k)
      p.strides[m][k] = ops[k].strides()[d] * int64_t(element_size(ops[k].dtype()));
    ++m;
  }
  if (m == 0) {  // scalar-like: one element
    p.shape[0] = 1;
    for (int k = 0; k < nops; ++k)
      p.strides[0][k] = 0;
    m = 1;
  }
  p.ndim = m;
  return p;
}

void run_range(const Plan& p, int64_t begin, int64_t end, InnerLoop& inner) {
  int64_t idx[kMaxDims];
  char* ptrs[kMaxOps];
  int64_t rem = begin;
  for (int d = 0; d < p.ndim; ++d) {
    idx[d] = rem % p.shape[d];
    rem /= p.shape[d];
  }
  for (int k = 0; k < p.nops; ++k) {
    char* ptr = p.base[k];
    for (int d = 0; d < p.ndim; ++d)
      ptr += idx[d] * p.strides[d][k];
    ptrs[k] = ptr;
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = std::min(p.shape[0] - idx[0], end - pos);
    inner(ptrs, p.strides[0], n);
    pos += n;
    if (pos >= end) break;
    // Advance: the inner dim wrapped; carry into outer dims.
    for (int k = 0; k < p.nops; ++k)
      ptrs[k] += (n - 0) * p.strides[0][k];
    idx[0] += n;
    for (int d = 0; d + 1 < p.ndim && idx[d] == p.shape[d]; ++d) {
      for (int k = 0; k < p.nops; ++k)
        ptrs[k] += p.strides[d + 1][k] - p.shape[d] * p.strides[d][k];
      idx[d] = 0;
      ++idx[d + 1];
    }
  }
}

}  // namespace

int64_t elementwise_grain(int cost) {
  static const int64_t env = [] {  // 0: unset
    const double v = tg::detail::env_number("TG_CPU_GRAIN", 0);
    return v < 1 ? int64_t(0) : int64_t(std::min(v, 0x1p62));
  }();
  // By default smaller chunks where there are more workers: a CPU PINN
  // step (B = 1024) on 16 cores took 9.5 ms at 32768, 8.8 at 8192.
  int64_t base = env;
  if (!base) {
    const int w = parallel_workers();
    base = w >= 16 ? kGrainSize / 4 : w >= 8 ? kGrainSize / 2 : kGrainSize;
  }
  return std::max<int64_t>(1024, base / std::max(cost, 1));
}

void for_each(const Tensor* ops, int nops, InnerLoop inner, bool parallel, int cost) {
  TG_INTERNAL_ASSERT(nops >= 1 && nops <= kMaxOps, "bad operand count");
  int64_t numel = ops[0].numel();
  if (numel == 0) return;
  Plan p = make_plan(ops, nops);
  const int64_t grain = elementwise_grain(cost);
  if (!parallel || numel < grain) {
    run_range(p, 0, numel, inner);
    return;
  }
  parallel_for(numel, grain, [&](int64_t b, int64_t e) { run_range(p, b, e, inner); });
}

#ifdef TAPEGRAD_TSAN
constexpr bool kTsanBuild = true;
#else
constexpr bool kTsanBuild = false;
#endif

namespace {

// Arenas of 2, 4, 8, ... threads (log2 of the size indexes them), made on
// first use and kept for the process (never destroyed: a loop may run
// during static destruction).
tbb::task_arena& small_arena(int log2_size) {
  static std::mutex mu;
  static tbb::task_arena* arenas[31] = {};
  std::lock_guard<std::mutex> g(mu);
  if (!arenas[log2_size]) arenas[log2_size] = new tbb::task_arena(1 << log2_size);
  return *arenas[log2_size];
}

}  // namespace

int parallel_workers() { return kTsanBuild ? 1 : std::max(1, tbb::this_task_arena::max_concurrency()); }

void parallel_for(int64_t n, int64_t grain, FunctionRef<void(int64_t, int64_t)> f) {
  if (n <= 0) return;
  // Debian's libtbb is not built with ThreadSanitizer, which then cannot see
  // TBB's own synchronisation and reports its work stealing as races: under
  // TSan the kernels run on the calling thread, and TSan checks the engine's
  // and the allocator's threading.
  if (n <= grain || kTsanBuild) {
    f(0, n);
    return;
  }
  auto run = [&] {
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                      [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
  };
  // A loop of fewer chunks than the arena has threads runs in an arena of
  // the next power of two threads: TBB offers a parallel loop's work to
  // every idle worker of its arena, and a training step runs hundreds of
  // loops of a few chunks (a CPU PINN step took longer on 16 threads than on
  // 2). A 65k-element add in a 16-thread arena on 2 cores: 20.4 us, in an
  // arena of 2: 13.8. Loops inside a worker (nested) stay where they are.
  const int64_t chunks = (n + grain - 1) / grain;
  int k = 1;
  while (k < 30 && (int64_t(1) << k) < chunks)
    ++k;
  if ((int64_t(1) << k) >= tbb::this_task_arena::max_concurrency() ||
      tbb::this_task_arena::current_thread_index() > 0 || !detail::switched_on<detail::OffSwitch::kCpuSmallArenas>())
    return run();
  small_arena(k).execute(run);
}

}  // namespace tg::cpu
