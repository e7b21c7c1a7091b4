// A build without NCCL: the process group cannot be created, and says why.
#include <tapegrad/distributed/distributed.h>
#include <tapegrad/tensor/error.h>

namespace tg::distributed {
namespace {
[[noreturn]] void unavailable(const char* what) {
  TG_ERROR(what,
           ": tapegrad was built without NCCL (configure with TAPEGRAD_NCCL=ON on a machine "
           "with nccl.h and libnccl to use tg::distributed)");
}
}  // namespace

bool is_available() { return false; }

std::shared_ptr<ProcessGroup> ProcessGroup::init(int, int, const std::string&, int, Options) {
  unavailable("ProcessGroup::init");
}
std::shared_ptr<ProcessGroup> ProcessGroup::init_from_env(Options) { unavailable("ProcessGroup::init_from_env"); }
std::vector<std::shared_ptr<ProcessGroup>> ProcessGroup::init_local(const std::vector<int>&, Options) {
  unavailable("ProcessGroup::init_local");
}

}  // namespace tg::distributed
