// Internal: the launch encoder. Every library call that puts work on a CUDA
// stream (a kernel, a cuBLAS, cuSOLVER or cuSPARSE call, a CUB sort or scan,
// a reduction, a gather or scatter, an asynchronous copy, a collective)
// opens one LaunchEncoder on that stream first and names the memory its
// launches read and write, temporaries included; memory a call needs for
// itself (a library's workspace, a sort's temporary storage) it asks of the
// encoder (workspace), which makes it capturable. An elementwise kernel that
// can also run as one step of a fused kernel says so (fusable). The kernels know nothing
// else: while the stream captures, the encoder hands what the call added to
// the capture (its graph nodes, their accesses, the fusable step) to the
// capture's observer (cuda/runtime/capture_observer.h), which is where CUDA-graph
// fusion and dependency relaxation (graphs/) read it. Off a capture an
// encoder costs one atomic load. A call that names nothing is a barrier to
// the relaxation, never a race.
//
// This is the runtime's side of the encoder (LaunchEncoderBase: the
// capture, the byte ranges named, the fusable step, the workspace), which
// knows no Tensor: cuda/launch.h, above the tensor layer, adds the Tensor
// forms (LaunchEncoder::read, write; span_of, storage_of). The step types
// below are plain data shared by the host and the fused kernel
// (cuda/kernels/fused.cu, functors.cuh) and read by graphs/fusion.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <tapegrad/tensor/scalar_type.h>

namespace tg::cuda {

namespace fusion {

enum Kind : int8_t {
  kNone = 0,
  kBinary,                 // BinaryFn
  kBinaryScalar,           // BinaryScalarFn
  kAddScaled,              // AddScaledFn
  kUnary,                  // UnaryFn
  kActivationGrad,         // ActivationGradFn
  kActivationGradProduct,  // ActivationGradProductFn
  kCopy,                   // CopyFn, same dtype
  kAddN,                   // add_n: out, a, then the summands
  kMulBackward,            // mul backward: ga, gb, g, a, b
  kFill,                   // FillFn (the value's bits)
};

constexpr int kMaxOperands = 18;  // add_n: out, a and 16 summands
constexpr int kFunctorBytes = 32;
constexpr int kMaxSteps = 16;
// Larger operands keep their own (vectorized) kernels: fusion is for the
// launch-bound sizes. max_elements() is kMaxElements unless
// TG_CUDA_FUSION_MAX_ELEMENTS (read once; a count of elements) says otherwise.
constexpr int64_t kMaxElements = int64_t(1) << 18;
int64_t max_elements();

// One elementwise kernel as a step of a fused kernel. Operands [0, nout)
// are written, the rest read; an operand whose bit is set in `scalar` is one
// element read by every index; a read operand o < 4 with period[o] > 0 is
// read at element i % period[o] (a bias against rows).
struct Step {
  int8_t kind = kNone;
  int8_t nops = 0;
  int8_t nout = 1;
  uint32_t scalar = 0;
  bool periodic = false;  // some period[o] > 0
  int32_t period[4] = {};
  char* ptr[kMaxOperands] = {};
  alignas(8) unsigned char fn[kFunctorBytes] = {};  // the functor's bytes (functor kinds)
};

// What the fused kernel runs: the steps in order for each of n elements.
struct Program {
  int64_t n = 0;
  int nsteps = 0;
  Step steps[kMaxSteps];
};
static_assert(sizeof(Program) <= 4096, "the fused kernel's argument must fit the classic 4 KiB limit");

// A kernel that fused steps can follow in the same launch (a head): each of
// its threads writes at most one element of one dense output (n elements of
// the launch's dtype at `out`, element `lin` from the thread that computes
// it) after reading `reads` (whole spans, read by many threads), so the
// steps can run in that thread on element lin once it is stored. Its own
// arguments are `args` (bytes); its launch geometry grid x block.
enum HeadKind : int8_t {
  kNoHead = 0,
  kSmallGemmHead,  // cuda/kernels/small_gemm.cuh's product (SmallGemmOperands)
  kMlpHead,        // cuda/kernels/small_mlp.cuh's MLP (MlpOperands)
};
constexpr int kHeadArgBytes = 384;
constexpr int kHeadReads = 17;  // an MLP's input and 8 layers' weights and biases
struct Head {
  int8_t kind = kNoHead;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  char* out = nullptr;
  int nreads = 0;
  const char* read_begin[kHeadReads] = {};
  int64_t read_bytes[kHeadReads] = {};
  // Memory it also writes, from many threads (a recorded MLP's saved
  // pre-activations): no step of its group may touch it.
  const char* written_begin = nullptr;
  int64_t written_bytes = 0;
  alignas(8) unsigned char args[kHeadArgBytes] = {};
};

// What a fused head's kernel takes: the head's arguments, then the steps
// (program.n: the head's elements).
struct HeadProgram {
  alignas(8) unsigned char args[kHeadArgBytes];
  Program program;
};
static_assert(sizeof(HeadProgram) <= 4096, "the fused head's argument must fit the classic 4 KiB limit");

// A captured launch that can run as a step, or as a head (head.kind): the
// graph node (cudaGraphNode_t) it became.
struct Recorded {
  void* node;
  ScalarType dtype;
  int64_t n;
  Step step;
  Head head{};
};

// Memory a launch reads or writes: [begin, begin + bytes). `scratch`: a
// workspace the launch alone uses (ordered as a write, but not counted as
// the bytes it streams: CUDAGraph's choice to relax looks at those).
struct Access {
  const char* begin;
  int64_t bytes;
  bool written;
  bool scratch = false;
};

// Whether a capture is underway in this process (cheap: an atomic load).
bool captures_underway();

}  // namespace fusion

// The kernels open a LaunchEncoder (cuda/launch.h); the runtime's calls
// (cuda/runtime/libraries.h) take this base, which names memory by bytes.
class LaunchEncoderBase {
 public:
  explicit LaunchEncoderBase(void* stream);  // cudaStream_t
  ~LaunchEncoderBase();
  LaunchEncoderBase(const LaunchEncoderBase&) = delete;
  LaunchEncoderBase& operator=(const LaunchEncoderBase&) = delete;

  // Whether the stream captures (what is named is then recorded).
  bool recording() const { return active_; }
  void add(const fusion::Access& a) {
    if (active_) accesses_.push_back(a);
  }
  // The call's one kernel (function `func`, first argument `arg0` of
  // `arg0_bytes` bytes, to verify that the node is that launch) is `step`
  // over n elements of `dtype`: fusion may run it inside a fused kernel.
  // Only Float32 and Float64 steps of at most max_elements() are kept.
  void fusable(const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype, int64_t n,
               const fusion::Step& step);
  // The call's one kernel is a head (fusion::Head) over n elements: fused
  // steps may follow it in its launch. Float32 and Float64 only.
  void fusable_head(const void* func, const void* arg0, size_t arg0_bytes, ScalarType dtype, int64_t n,
                    const fusion::Head& head);
  // `bytes` of device memory for the call's own use (a library's workspace,
  // a sort's temporary storage), recorded as written; nullptr for 0 bytes.
  // On the current device, whose current stream must be the encoder's; valid
  // for the launches queued while the encoder lives; the requests of one
  // encoder never overlap. While the stream captures into a CUDA graph the
  // memory is the graph's own, kept alive with it (captured calls then touch
  // disjoint memory: the graph's relaxation may run them concurrently); else
  // `eager` when given (memory of at least `bytes` that the caller keeps for
  // this stream, such as cuBLAS's workspace), else a per-(thread, stream)
  // cache that grows as needed up to a few MiB, beyond which the memory is
  // the call's own, freed when the encoder ends (cuda/runtime/libraries.cpp).
  void* workspace(size_t bytes, void* eager = nullptr);
  template <class T> T* workspace_for(int64_t count) { return static_cast<T*>(workspace(size_t(count) * sizeof(T))); }

 private:
  bool active_ = false;
  void* stream_ = nullptr;
  unsigned long long id_ = 0;
  std::vector<void*> before_;  // the stream's capture dependencies before the call
  std::vector<fusion::Access> accesses_;
  // fusable(): the kernel, its first argument, the step (left empty, not
  // zeroed, by the launches that never capture)
  const void* func_ = nullptr;
  std::vector<unsigned char> arg0_;
  std::optional<fusion::Recorded> step_;
  // workspace(): cached buffers outgrown during this call (freed when it
  // ends) and the bytes of the current one handed out so far
  std::vector<std::shared_ptr<void>> held_;
  size_t cached_used_ = 0;
};

}  // namespace tg::cuda
