// Saving and loading tensors and modules in the safetensors format
// (docs/NN.md "Saving and loading"): an 8-byte little-endian header length,
// a JSON header {"name": {"dtype", "shape", "data_offsets"}, "__metadata__":
// {...}} padded with spaces to a multiple of 8 bytes, then the tensors' bytes
// (row-major, little-endian), back to back. Files written by the Python
// safetensors package load here, and ours load there.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <tapegrad/nn/module.h>

namespace tg::nn {

/// String metadata stored in the header's "__metadata__".
using Metadata = std::vector<std::pair<std::string, std::string>>;

/// Writes `tensors` (any device, dtype and strides; names unique) to `path`.
/// The layout is fixed, so equal inputs give equal bytes: tensors ordered by
/// element size (largest first), then by name, compact JSON with the keys in
/// the order dtype, shape, data_offsets, "__metadata__" first when given.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata = {});
/// Reads a safetensors file (in the file's order) onto `device`; the file is
/// validated (offsets, sizes, dtypes, no holes or overlaps) with errors naming
/// the file and the tensor.
NamedTensors load_safetensors(const std::string& path, Device device = Device(kCPU));
/// The "__metadata__" of a safetensors file.
Metadata load_safetensors_metadata(const std::string& path);

/// Saves module.state_dict() to `path` (safetensors).
void save(const Module& module, const std::string& path);
/// Loads a file written by save (or by the Python package) into `module`
/// (load_state_dict with `strict`).
void load(Module& module, const std::string& path, bool strict = true);

}  // namespace tg::nn
