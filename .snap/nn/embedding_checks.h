// The option checks functional::embedding and the Embedding module share.
#pragma once

#include <cstdint>
#include <optional>

namespace tg::nn::detail {
// padding_idx in [0, num) (a negative one wraps); an error naming `op` otherwise.
int64_t embedding_padding_idx(int64_t padding_idx, int64_t num, const char* op);
// max_norm finite and >= 0 (when given), norm_type > 0.
void check_embedding_norm(std::optional<double> max_norm, double norm_type, const char* op);
}  // namespace tg::nn::detail
