// Data parallelism across GPUs on NCCL (docs/DISTRIBUTED.md): a process group
// with asynchronous collectives on a per-device communication stream, and
// DistributedDataParallel, which all-reduces gradient buckets while backward
// runs. Link tapegrad::distributed. Built without NCCL, is_available() is
// false and creating a group throws a tg::Error saying so.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include <tapegrad/cuda/stream.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::nn {
class Module;
}

namespace tg::distributed {

/// Whether this build has NCCL (the GPU count is cuda::device_count()).
bool is_available();

/// The reduction of all_reduce and reduce_scatter (Avg: the sum divided by
/// the group's size).
enum class ReduceOp { Sum, Avg, Max, Min, Product };

/// Settings of a process group.
struct Options {
  /// How long a collective may take before the group reports it and aborts
  /// (a peer that died, or one that called a different collective).
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

/// An asynchronous collective. Its work is queued on the group's
/// communication stream; nothing waits on the host unless asked.
class Work {
 public:
  virtual ~Work() = default;
  /// Makes the current stream (of the group's device) wait for the
  /// collective (an event; no host sync).
  virtual void wait() const = 0;
  /// Whether the collective has finished on the device.
  virtual bool is_completed() const = 0;
  /// Waits on the host for the collective, up to the group's timeout; throws
  /// a tg::Error (and aborts the group) when it does not finish in time.
  virtual void synchronize() const = 0;
};

/// Where this process sits in a launch, read from the environment: RANK,
/// WORLD_SIZE and LOCAL_RANK (scripts/launch.sh, torchrun); else what an MPI
/// launcher sets (Open MPI's OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK,
/// MPICH's and Intel MPI's PMI_RANK / PMI_SIZE / MPI_LOCALRANKID); else
/// Slurm's (SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID). The rendezvous file
/// is TG_RENDEZVOUS_FILE in every case (no MPI library is linked: the launcher
/// only starts the processes). Fields not found are -1 / empty.
struct LaunchInfo {
  int rank = -1;                ///< this process's rank
  int world_size = -1;          ///< the number of ranks
  int local_rank = -1;          ///< its rank on this host (the GPU it drives)
  std::string rendezvous_file;  ///< TG_RENDEZVOUS_FILE
  std::string launcher;         ///< "env", "Open MPI", "MPICH / Intel MPI", "Slurm", or empty
};
/// Reads LaunchInfo (above); throws a tg::Error naming the variable when one
/// is set but is not a number.
LaunchInfo launch_from_env();

/// A group of ranks, one GPU each, communicating through NCCL.
///
/// Collectives take tensors on the group's device (contiguous, dense; float32,
/// float64, bfloat16, float16 or int64), wait for the work queued on the
/// current stream, run on the group's communication stream and return a
/// Work. Every rank must call the same collectives in the same order. A
/// timed-out or failed collective aborts the group: later calls throw a
/// tg::Error that says what happened.
class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  /// One process per GPU: this process is `rank` of `world_size`, on `device`
  /// (-1: rank % device_count()). Rank 0 writes the NCCL id to
  /// `rendezvous_file` (on a file system every rank sees); the others read it
  /// (waiting up to the timeout).
  static std::shared_ptr<ProcessGroup> init(int rank, int world_size, const std::string& rendezvous_file,
                                            int device = -1, Options options = {});
  /// init() from the environment (launch_from_env(): RANK / WORLD_SIZE /
  /// LOCAL_RANK, or an MPI launcher's or Slurm's variables, and
  /// TG_RENDEZVOUS_FILE); the device is the local rank when known.
  static std::shared_ptr<ProcessGroup> init_from_env(Options options = {});
  /// One process driving several GPUs: one group member per device (rank i
  /// on devices[i]); drive each from its own thread.
  static std::vector<std::shared_ptr<ProcessGroup>> init_local(const std::vector<int>& devices, Options options = {});

  /// This member's rank.
  virtual int rank() const = 0;
  /// The number of ranks.
  virtual int size() const = 0;
  /// The GPU this member drives.
  virtual int device() const = 0;
  /// The communication stream the collectives run on.
  virtual cuda::Stream stream() const = 0;

  /// t = the reduction of every rank's t, in place.
  virtual std::shared_ptr<Work> all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum) = 0;
  /// t = root's t, in place.
  virtual std::shared_ptr<Work> broadcast(const Tensor& t, int root = 0) = 0;
  /// out [size * n...] = every rank's in [n...], in rank order.
  virtual std::shared_ptr<Work> all_gather(const Tensor& out, const Tensor& in) = 0;
  /// out [n...] = rank r's block of the reduction of every rank's in
  /// [size * n...].
  virtual std::shared_ptr<Work> reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op = ReduceOp::Sum) = 0;
  /// Every rank reaches this point (a host wait, up to the timeout).
  virtual void barrier() = 0;
  /// Aborts the group's communicator: pending collectives end, later ones
  /// throw. Called on timeouts; callers may call it on their own errors so
  /// that peers fail fast.
  virtual void abort(const std::string& why) = 0;
};

/// Settings of DistributedDataParallel.
struct DDPOptions {
  /// Bucket size: gradients are grouped into buckets of about this many
  /// bytes, each all-reduced as soon as its last gradient is accumulated.
  size_t bucket_cap_bytes = size_t(25) << 20;
  /// The first bucket (the last layers' gradients, ready first) is smaller so
  /// that communication starts early.
  size_t first_bucket_cap_bytes = size_t(1) << 20;
  /// Parameters that get no gradient in an iteration (not reached by the
  /// loss) are always handled: at the end of backward their buckets are
  /// reduced with zeros for them, so they get the average of the other
  /// ranks' gradients (zeros when no rank used them; OURS: PyTorch leaves a
  /// globally unused parameter's .grad as it was). With this option,
  /// forward() also walks the output's graph and marks the parameters it
  /// cannot reach ready at once, so their buckets need not wait for the end.
  bool find_unused_parameters = false;
  /// Rebuild the buckets after the first iteration in the order gradients
  /// actually arrived (rank 0's order, broadcast).
  bool rebuild_buckets = true;
  /// As PyTorch's: after a reduction each parameter's .grad is a view into
  /// its bucket, so the next backward accumulates into the bucket itself and
  /// the copies into and out of it are skipped (two fewer kernels per
  /// parameter on the path after the last gradient). .grad then shares
  /// memory with the bucket; zero_grad(set_to_none = false) keeps the views,
  /// set_to_none = true drops them for an iteration (its reduction copies
  /// and makes them again).
  bool gradient_as_bucket_view = false;
};

/// Data parallel training of a module (as torch.nn.parallel.DistributedDataParallel).
///
/// Construction broadcasts rank 0's parameters and buffers. forward() runs the
/// module and arms the reducer; the backward into the parameters (backward()
/// with grad mode off, the usual loss.backward()) all-reduces the gradients
/// bucket by bucket from the parameters' post-accumulate-grad hooks: the
/// communication stream waits on the streams that produced the gradients
/// (events), averages each bucket, writes it back into .grad, and the
/// stream current at forward() waits on the communication stream before
/// backward() returns — no host sync. Derivative passes with create_graph
/// (grad(u, x, create_graph), PINN residuals, gradient penalties) do not
/// trigger it; only the final backward into the parameters does.
class DistributedDataParallel {
 public:
  /// Wraps `module` (its parameters on the group's device).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  /// The module's forward; arms the reducer for the next backward.
  Tensor forward(const Tensor& x);
  /// forward(x).
  Tensor operator()(const Tensor& x) { return forward(x); }

  /// While a guard lives, backward accumulates into .grad locally without
  /// communication (gradient accumulation); the next synchronized backward
  /// all-reduces the accumulated gradients.
  class NoSync {
   public:
    /// Turns synchronization off for `ddp` until the guard dies.
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  /// A NoSync guard.
  NoSync no_sync() { return NoSync(*this); }

  /// Waits on the host until the last iteration's all-reduces are done (up
  /// to the group's timeout; a tg::Error then).
  void synchronize();

  /// The wrapped module.
  nn::Module& module() { return *module_; }
  /// The process group.
  ProcessGroup& group() { return *group_; }
  /// The parameters of each bucket (indices into module().parameters()), in
  /// launch order.
  std::vector<std::vector<size_t>> buckets() const;

  /// Device timestamps of the last synchronized iteration, for overlap
  /// measurements, in milliseconds after forward() armed the reducer: when
  /// the last gradient became ready (on the stream that produced it), and per
  /// bucket in launch order when its all-reduce began and ended on the
  /// communication stream.
  struct Timeline {
    float last_gradient = 0;          ///< the last gradient ready
    std::vector<float> bucket_start;  ///< each bucket's all-reduce began
    std::vector<float> bucket_end;    ///< each bucket's gradients were written back
  };
  /// The last iteration's timeline (a host wait for its events).
  Timeline timeline();

  class Reducer;  ///< the gradient reducer (internal)

 private:
  friend class NoSync;
  std::shared_ptr<nn::Module> module_;
  std::shared_ptr<ProcessGroup> group_;
  std::unique_ptr<Reducer> reducer_;
};

}  // namespace tg::distributed
