// The NCCL process group (docs/DISTRIBUTED.md "Process groups"): one
// communicator per member, a dedicated high-priority communication stream,
// events for every ordering (no host sync), and a watchdog thread that
// aborts the communicator when a collective outlives the timeout or NCCL
// reports an asynchronous error, so that peers of a failed rank get an error
// instead of a hang.
#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <list>
#include <mutex>
#include <sstream>
#include <thread>
#include <unistd.h>

#include <tapegrad/cuda/allocator.h>
#include <tapegrad/cuda/device.h>
#include <tapegrad/cuda/capture.h>
#include <tapegrad/distributed/distributed.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

#include "cuda/launch.h"

namespace tg::distributed {
namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_dtype(ScalarType t, const char* op) {
  ncclDataType_t r = ncclNumTypes;  // the list's "NCCL has no such type"
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, ...) \
  case ScalarType::Name:                                                                                 \
    r = NcclType;                                                                                        \
    break;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  TG_CHECK(r != ncclNumTypes, op, ": NCCL collectives take float32, float64, bfloat16, float16 or int64, got ", t);
  return r;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
    default: return ncclProd;
  }
}

class NcclGroup;

class NcclWork final : public Work {
 public:
  NcclWork(std::shared_ptr<NcclGroup> g, std::shared_ptr<cuda::Event> done, std::string what)
      : group_(std::move(g)), done_(std::move(done)), what_(std::move(what)) {}
  void wait() const override;
  bool is_completed() const override { return done_->query(); }
  void synchronize() const override;

 private:
  std::shared_ptr<NcclGroup> group_;
  std::shared_ptr<cuda::Event> done_;
  std::string what_;
};

class NcclGroup final : public ProcessGroup, public std::enable_shared_from_this<NcclGroup> {
 public:
  NcclGroup(ncclComm_t comm, int rank, int size, int device, Options o)
      : comm_(comm), rank_(rank), size_(size), device_(device), options_(o) {
    // From the high-priority pool, never destroyed: gradients reduced on it
    // may outlive the group, and freeing them records an event on it.
    stream_ = cuda::stream_from_pool(device_, /*high_priority=*/true);
    order_ = tg::empty({1}, TensorOptions().dtype(kBool).device(Device(kCUDA, device_)));
    watchdog_ = std::thread([this] { watch(); });
  }
  ~NcclGroup() override {
    {
      std::lock_guard<std::mutex> l(m_);
      stop_ = true;
    }
    cv_.notify_all();
    watchdog_.join();
    if (comm_) {
      // Work still queued may finish first, up to the timeout (a collective
      // its peers never join is then cut short by the abort).
      const auto start = Clock::now();
      while (cudaStreamQuery(static_cast<cudaStream_t>(stream_.handle())) == cudaErrorNotReady &&
             Clock::now() - start < options_.timeout)
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      ncclCommAbort(comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const override { return device_; }
  cuda::Stream stream() const override { return stream_; }

  std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op) override {
    return run("all_reduce", {t}, [&](cudaStream_t s) {
      return ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype(), "all_reduce"),
                           nccl_op(op), comm_, s);
    });
  }
  std::shared_ptr<Work> broadcast(const Tensor& t, int root) override {
    TG_CHECK(root >= 0 && root < size_, "broadcast: root ", root, " is not a rank of a group of ", size_);
    return run("broadcast", {t}, [&](cudaStream_t s) {
      return ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_dtype(t.dtype(), "broadcast"), root,
                           comm_, s);
    });
  }
  std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) override {
    TG_CHECK(out.numel() == in.numel() * size_ && out.dtype() == in.dtype(), "all_gather: out (",
             shape_str(out.sizes()), ", ", out.dtype(), ") must hold ", size_, " x in (", shape_str(in.sizes()), ", ",
             in.dtype(), ")");
    return run("all_gather", {out, in}, [&](cudaStream_t s) {
      return ncclAllGather(in.data_ptr(), out.data_ptr(), size_t(in.numel()), nccl_dtype(in.dtype(), "all_gather"),
                           comm_, s);
    });
  }
  std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    TG_CHECK(in.numel() == out.numel() * size_ && out.dtype() == in.dtype(), "reduce_scatter: in (",
             shape_str(in.sizes()), ", ", in.dtype(), ") must hold ", size_, " x out (", shape_str(out.sizes()), ", ",
             out.dtype(), ")");
    return run("reduce_scatter", {out, in}, [&](cudaStream_t s) {
      return ncclReduceScatter(in.data_ptr(), out.data_ptr(), size_t(out.numel()),
                               nccl_dtype(in.dtype(), "reduce_scatter"), nccl_op(op), comm_, s);
    });
  }
  void barrier() override {
    Tensor one = tg::ones({1}, TensorOptions().dtype(kFloat32).device(Device(kCUDA, device_)));
    all_reduce(one, ReduceOp::Sum)->synchronize();
  }
  void abort(const std::string& why) override {
    std::lock_guard<std::mutex> l(m_);
    abort_locked(why);
  }

  // Throws the group's error, if any.
  void check(const char* op) {
    std::lock_guard<std::mutex> l(m_);
    check_locked(op);
  }
  // What a collective that outlived the timeout reports.
  std::string timeout_message(const std::string& what) const {
    return what + " did not finish within " + std::to_string(options_.timeout.count()) +
           " ms: a peer died, failed, or called a different collective";
  }
  const Options& options() const { return options_; }
  std::string describe(const char* op) const {
    std::ostringstream o;
    o << "NCCL " << op << " on rank " << rank_ << " of " << size_ << " (cuda:" << device_ << ")";
    return o.str();
  }

 private:
  template <class F> std::shared_ptr<Work> run(const char* op, std::vector<Tensor> tensors, F&& launch) {
    for (const Tensor& t : tensors)
      TG_CHECK(t.is_cuda() && t.device().index() == device_ && !t.is_sparse() && t.is_contiguous(), op,
               ": tensors must be dense and contiguous on the group's device cuda:", device_, ", got ",
               t.is_sparse() ? "a sparse tensor" : (t.is_contiguous() ? "" : "a non-contiguous tensor "),
               t.is_sparse() ? "" : shape_str(t.sizes()), " on ", t.device());
    cuda::DeviceGuard g(device_);
    const cuda::Stream current = cuda::current_stream(device_);
    const bool capturing = cuda::is_current_stream_capturing();
    std::lock_guard<std::mutex> l(m_);
    check_locked(op);
    if (current != stream_) {
      cuda::Event ready;
      ready.record(current);
      ready.block(stream_);
    }
    ncclResult_t r;
    {
      // Under capture, the collective's nodes are recorded with what they
      // touch, so that relaxing the graph's dependencies lets the backward
      // run beside them; every collective also writes the group's order
      // byte, which keeps them in the order every rank launched them.
      cuda::LaunchEncoder access(stream_.handle());
      for (const Tensor& t : tensors)
        access.write(t);
      access.write(order_);
      r = launch(static_cast<cudaStream_t>(stream_.handle()));
    }
    if (r != ncclSuccess && r != ncclInProgress) {
      const std::string why = describe(op) + " failed: " + ncclGetErrorString(r);
      abort_locked(why);
      TG_CHECK(false, why);
    }
    for (const Tensor& t : tensors)
      if (t.impl()->storage()->allocator()) cuda::record_stream(t.impl()->storage()->data(), stream_);
    auto done = std::make_shared<cuda::Event>();
    done->record(stream_);
    if (!capturing) pending_.push_back({done, Clock::now(), describe(op)});
    cv_.notify_all();
    return std::make_shared<NcclWork>(shared_from_this(), done, describe(op));
  }

  void check_locked(const char* op) const {
    TG_CHECK(error_.empty(), op, " on rank ", rank_, " of ", size_, ": the process group is aborted (", error_,
             "); create a new group to go on");
  }

  void abort_locked(const std::string& why) {
    if (!error_.empty()) return;
    error_ = why;
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    pending_.clear();
  }

  // The watchdog: every few milliseconds while collectives are pending.
  void watch() {
    // Relaxed: the queries below are legal while another thread captures a
    // graph, also in Global mode (which would otherwise refuse them and
    // invalidate that capture).
    cudaStreamCaptureMode relaxed = cudaStreamCaptureModeRelaxed;
    (void)cudaThreadExchangeStreamCaptureMode(&relaxed);
    std::unique_lock<std::mutex> l(m_);
    while (!stop_) {
      cv_.wait_for(l, std::chrono::milliseconds(pending_.empty() ? 100 : 5));
      if (stop_ || !error_.empty()) continue;
      if (comm_) {
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(comm_, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress) {
          abort_locked("NCCL reported an asynchronous error on rank " + std::to_string(rank_) + ": " +
                       ncclGetErrorString(async));
          continue;
        }
      }
      for (auto it = pending_.begin(); it != pending_.end();) {
        bool done = false;
        try {
          done = it->done->query();
        } catch (const std::exception& e) {  // a device error: report it, never end the process
          abort_locked(std::string("NCCL ") + it->what + ": " + e.what());
          break;
        }
        if (done) {
          it = pending_.erase(it);
        } else if (Clock::now() - it->start > options_.timeout) {
          abort_locked(timeout_message(it->what));
          break;
        } else {
          ++it;
        }
      }
    }
  }

  struct Pending {
    std::shared_ptr<cuda::Event> done;
    Clock::time_point start;
    std::string what;
  };
  ncclComm_t comm_;
  int rank_, size_, device_;
  Options options_;
  cuda::Stream stream_;
  Tensor order_;  // never read or written: the address collectives "write" under capture
  std::mutex m_;
  std::condition_variable cv_;
  std::list<Pending> pending_;
  std::string error_;
  bool stop_ = false;
  std::thread watchdog_;
};

void NcclWork::wait() const {
  group_->check("wait");
  done_->block(cuda::current_stream(group_->device()));
}

void NcclWork::synchronize() const {
  const auto start = Clock::now();
  while (!done_->query()) {
    group_->check(what_.c_str());
    if (Clock::now() - start > group_->options().timeout) {
      const std::string why = group_->timeout_message(what_);
      group_->abort(why);
      TG_CHECK(false, why);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  group_->check(what_.c_str());
}

void nccl_check(ncclResult_t r, const std::string& what) {
  TG_CHECK(r == ncclSuccess, what, " failed: ", ncclGetErrorString(r));
}

}  // namespace

bool is_available() { return true; }

std::shared_ptr<ProcessGroup> ProcessGroup::init(int rank, int world_size, const std::string& file, int device,
                                                 Options options) {
  TG_CHECK(world_size >= 1 && rank >= 0 && rank < world_size, "ProcessGroup::init: rank ", rank,
           " is not in a world of size ", world_size);
  const int n = cuda::device_count();
  TG_CHECK(n > 0, "ProcessGroup::init: no CUDA GPU here (NCCL needs one per rank)");
  if (device < 0) device = rank % n;
  TG_CHECK(device < n, "ProcessGroup::init: device ", device, " does not exist (", n, " GPUs)");
  TG_CHECK(!file.empty(), "ProcessGroup::init: a rendezvous file is needed (set TG_RENDEZVOUS_FILE)");
  ncclUniqueId id;
  if (rank == 0) {
    nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const std::string tmp = file + ".tmp." + std::to_string(getpid());
    {
      std::ofstream f(tmp, std::ios::binary);
      f.write(id.internal, sizeof(id.internal));
      TG_CHECK(f.good(), "ProcessGroup::init: could not write the rendezvous file ", tmp);
    }
    TG_CHECK(std::rename(tmp.c_str(), file.c_str()) == 0, "ProcessGroup::init: could not create ", file);
  } else {
    const auto start = Clock::now();
    for (;;) {
      std::ifstream f(file, std::ios::binary);
      if (f && f.read(id.internal, sizeof(id.internal)) && f.gcount() == std::streamsize(sizeof(id.internal))) break;
      TG_CHECK(Clock::now() - start < options.timeout, "ProcessGroup::init: rank ", rank, " waited ",
               options.timeout.count(), " ms for rank 0 to write ", file);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  // ncclCommInitRank blocks until every rank has joined. It runs on a helper
  // thread so that a rank that never starts (or uses another rendezvous
  // file) makes this one fail within the timeout instead of hanging: the
  // helper is then left behind and destroys the communicator if the peers
  // ever come.
  struct Init {
    std::mutex m;
    std::condition_variable cv;
    bool done = false, abandoned = false;
    ncclComm_t comm = nullptr;
    ncclResult_t result = ncclSuccess;
  };
  auto init = std::make_shared<Init>();
  std::thread([init, world_size, id, rank, device] {
    ncclComm_t comm = nullptr;
    ncclResult_t r =
        cudaSetDevice(device) == cudaSuccess ? ncclCommInitRank(&comm, world_size, id, rank) : ncclUnhandledCudaError;
    std::lock_guard<std::mutex> l(init->m);
    if (init->abandoned) {
      if (r == ncclSuccess) ncclCommDestroy(comm);
      return;
    }
    init->comm = comm;
    init->result = r;
    init->done = true;
    init->cv.notify_all();
  }).detach();
  const std::string what = "ncclCommInitRank (rank " + std::to_string(rank) + " of " + std::to_string(world_size) +
                           ", cuda:" + std::to_string(device) + ")";
  {
    std::unique_lock<std::mutex> l(init->m);
    if (!init->cv.wait_for(l, options.timeout, [&] { return init->done; })) {
      init->abandoned = true;
      TG_ERROR("ProcessGroup::init: ", what, " did not complete within ", options.timeout.count(),
               " ms: a rank did not start, or did not use the rendezvous file ", file,
               " (start every rank with the same file, or raise Options::timeout)");
    }
  }
  nccl_check(init->result, what);
  return std::make_shared<NcclGroup>(init->comm, rank, world_size, device, options);
}

std::shared_ptr<ProcessGroup> ProcessGroup::init_from_env(Options options) {
  const LaunchInfo l = launch_from_env();
  TG_CHECK(l.rank >= 0 && !l.rendezvous_file.empty(),
           "ProcessGroup::init_from_env: no rank in the environment (set RANK and WORLD_SIZE, or start the "
           "processes with mpirun or srun) or no TG_RENDEZVOUS_FILE (a fresh path on a file system every rank "
           "sees; got '",
           l.rendezvous_file, "')");
  return init(l.rank, l.world_size, l.rendezvous_file, l.local_rank, options);
}

std::vector<std::shared_ptr<ProcessGroup>> ProcessGroup::init_local(const std::vector<int>& devices, Options options) {
  const int n = cuda::device_count();
  TG_CHECK(!devices.empty(), "ProcessGroup::init_local: no devices given");
  for (int d : devices)
    TG_CHECK(d >= 0 && d < n, "ProcessGroup::init_local: device ", d, " does not exist (", n, " GPUs)");
  std::vector<ncclComm_t> comms(devices.size());
  nccl_check(ncclCommInitAll(comms.data(), int(devices.size()), devices.data()), "ncclCommInitAll");
  std::vector<std::shared_ptr<ProcessGroup>> out;
  for (size_t i = 0; i < devices.size(); ++i)
    out.push_back(std::make_shared<NcclGroup>(comms[i], int(i), int(devices.size()), devices[i], options));
  return out;
}

}  // namespace tg::distributed
