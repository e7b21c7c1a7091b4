// Internal: the environment switches that turn an optimization off.
#pragma once

#include <cstdlib>
#include <cstring>

namespace tg::detail {
// False only when the environment variable `name` is set to "0" (TG_CUBLASLT,
// TG_CUDA_PDL, TG_CUDA_GRAPH_FUSION, TG_CUDA_GRAPH_RELAX,
// TG_STRUCTURE_PROBE, TG_DEFER_TANGENTS, TG_MERGE_WEIGHT_GRADS). Callers read it
// once.
inline bool env_allows(const char* name) {
  const char* env = std::getenv(name);
  return !(env && std::strcmp(env, "0") == 0);
}
}  // namespace tg::detail
