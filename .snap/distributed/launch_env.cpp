// Where this process sits in a launch, from the environment (built with or
// without NCCL, so that it is tested everywhere).
#include <cerrno>
#include <cstdlib>

#include <tapegrad/distributed/distributed.h>
#include <tapegrad/tensor/error.h>

namespace tg::distributed {

namespace {

// The variable's value as an int; -1 when unset; throws when not a number.
int int_env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  TG_CHECK(errno == 0 && *end == '\0' && x >= 0 && x <= 1 << 30, "launch_from_env: ", name, "='", v,
           "' is not a rank or a size");
  return int(x);
}

}  // namespace

LaunchInfo launch_from_env() {
  struct Source {
    const char* launcher;
    const char *rank, *size, *local;
  };
  static const Source sources[] = {
      {"env", "RANK", "WORLD_SIZE", "LOCAL_RANK"},
      {"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"MPICH / Intel MPI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  LaunchInfo info;
  if (const char* f = std::getenv("TG_RENDEZVOUS_FILE")) info.rendezvous_file = f;
  for (const Source& s : sources) {
    const int rank = int_env(s.rank), size = int_env(s.size);
    if (rank < 0 || size < 0) continue;  // this launcher did not start us
    TG_CHECK(rank < size, "launch_from_env: ", s.rank, "=", rank, " is not below ", s.size, "=", size);
    info.rank = rank;
    info.world_size = size;
    info.local_rank = int_env(s.local);
    info.launcher = s.launcher;
    break;
  }
  return info;
}

}  // namespace tg::distributed
