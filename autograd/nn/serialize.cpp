#include <tapegrad/nn/serialize.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

namespace {

using Json = nlohmann::ordered_json;

const char* st_dtype(ScalarType t) {
  switch (t) {
    case kFloat64: return "F64";
    case kFloat32: return "F32";
    case kFloat16: return "F16";
    case kBFloat16: return "BF16";
    case kInt64: return "I64";
    case kBool: return "BOOL";
  }
  return "?";
}

bool from_st_dtype(const std::string& s, ScalarType* t) {
  static const std::pair<const char*, ScalarType> table[] = {
      {"F64", kFloat64}, {"F32", kFloat32}, {"F16", kFloat16}, {"BF16", kBFloat16}, {"I64", kInt64}, {"BOOL", kBool}};
  for (const auto& [name, dt] : table)
    if (s == name) {
      *t = dt;
      return true;
    }
  return false;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  TG_CHECK(f.good(), "load_safetensors: cannot open '", path, "'");
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The header of the file's bytes, checked: its JSON and where the data starts.
Json parse_header(const std::string& path, const std::string& bytes, size_t* data_start) {
  TG_CHECK(bytes.size() >= 8, "load_safetensors: '", path, "' is ", bytes.size(),
           " bytes long, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  TG_CHECK(n <= bytes.size() - 8, "load_safetensors: '", path, "' declares a header of ", n,
           " bytes but holds only ", bytes.size() - 8, " after the length");
  *data_start = 8 + size_t(n);
  Json h;
  try {
    h = Json::parse(bytes.begin() + 8, bytes.begin() + std::ptrdiff_t(*data_start));
  } catch (const std::exception& e) {
    TG_ERROR("load_safetensors: the header of '", path, "' is not valid JSON: ", e.what());
  }
  TG_CHECK(h.is_object(), "load_safetensors: the header of '", path, "' is not a JSON object");
  return h;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::set<std::string> names;
  for (const auto& [n, t] : tensors) {
    TG_CHECK(n != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    TG_CHECK(names.insert(n).second, "save_safetensors: the name '", n, "' appears twice");
    TG_CHECK(t.defined(), "save_safetensors: '", n, "' is an undefined tensor");
    TG_CHECK(!t.is_sparse(), "save_safetensors: '", n, "' is a sparse tensor; save to_dense() or its indices and values");
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    size_t ea = element_size(tensors[a].second.dtype()), eb = element_size(tensors[b].second.dtype());
    return ea != eb ? ea > eb : tensors[a].first < tensors[b].first;
  });
  Json h = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = m;
  }
  std::vector<Tensor> host;
  uint64_t offset = 0;
  for (size_t i : order) {
    const auto& [n, t] = tensors[i];
    Tensor c = t.detach().to(Device(kCPU)).contiguous();
    const uint64_t bytes = uint64_t(c.numel()) * element_size(c.dtype());
    Json e = Json::object();
    e["dtype"] = st_dtype(c.dtype());
    e["shape"] = std::vector<int64_t>(c.sizes().begin(), c.sizes().end());
    e["data_offsets"] = {offset, offset + bytes};
    h[n] = e;
    offset += bytes;
    host.push_back(c);
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  TG_CHECK(f.good(), "save_safetensors: cannot open '", path, "' for writing");
  uint64_t n = header.size();
  char len[8];
  for (int i = 0; i < 8; ++i) len[i] = char((n >> (8 * i)) & 0xff);
  f.write(len, 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const Tensor& c : host)
    if (c.numel() > 0) f.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.numel() * int64_t(element_size(c.dtype()))));
  TG_CHECK(f.good(), "save_safetensors: writing '", path, "' failed");
}

NamedTensors load_safetensors(const std::string& path, Device device) {
  const std::string bytes = read_file(path);
  size_t start = 0;
  Json h = parse_header(path, bytes, &start);
  const uint64_t buffer = bytes.size() - start;
  NamedTensors out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const Json& e = it.value();
    TG_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
             "load_safetensors: the entry '", name, "' of '", path, "' needs dtype, shape and data_offsets");
    ScalarType dt;
    const std::string ds = e["dtype"].get<std::string>();
    TG_CHECK(from_st_dtype(ds, &dt), "load_safetensors: '", name, "' in '", path, "' has dtype ", ds,
             ", which tapegrad does not support (F64, F32, F16, BF16, I64, BOOL)");
    IntList shape;
    for (const auto& d : e["shape"]) {
      TG_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "load_safetensors: '", name, "' in '", path,
               "' has a bad shape ", e["shape"].dump());
      shape.push_back(d.get<int64_t>());
    }
    const auto& off = e["data_offsets"];
    TG_CHECK(off.is_array() && off.size() == 2, "load_safetensors: '", name, "' in '", path,
             "' needs data_offsets [begin, end]");
    const uint64_t b = off[0].get<uint64_t>(), en = off[1].get<uint64_t>();
    const uint64_t want = uint64_t(shape_numel(shape)) * element_size(dt);
    TG_CHECK(b <= en && en <= buffer && en - b == want, "load_safetensors: '", name, "' in '", path,
             "' has data_offsets [", b, ", ", en, "] but its ", ds, " ", shape, " needs ", want,
             " bytes within the ", buffer, "-byte buffer");
    ranges.emplace_back(b, en);
    Tensor t = tg::empty(shape, TensorOptions().dtype(dt));
    if (want) std::memcpy(t.data_ptr(), bytes.data() + start + b, want);
    out.emplace_back(name, device.is_cpu() ? t : t.to(device));
  }
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    TG_CHECK(b == at, "load_safetensors: the tensors of '", path, "' ", b < at ? "overlap" : "leave a hole",
             " at byte ", std::min(b, at), " of the buffer");
    at = e;
  }
  TG_CHECK(at == buffer, "load_safetensors: '", path, "' has ", buffer - at, " bytes after its last tensor");
  return out;
}

Metadata load_safetensors_metadata(const std::string& path) {
  const std::string bytes = read_file(path);
  size_t start = 0;
  Json h = parse_header(path, bytes, &start);
  Metadata m;
  if (h.contains("__metadata__"))
    for (auto it = h["__metadata__"].begin(); it != h["__metadata__"].end(); ++it)
      m.emplace_back(it.key(), it.value().get<std::string>());
  return m;
}

void save(const Module& module, const std::string& path) { save_safetensors(path, module.state_dict()); }

void load(Module& module, const std::string& path, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace tg::nn
