#include <tapegrad/nn/serialize.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::nn {

namespace {

using Json = nlohmann::ordered_json;

const char* st_dtype(ScalarType t) {
  switch (t) {
#define TG_DTYPE(Name, HostT, DeviceT, Category, Compute, Rank, DlCode, DlBits, CudaType, NcclType, py, st, ...) \
  case ScalarType::Name:                                                                                         \
    return st;
#include <tapegrad/tensor/dtypes.def>
#undef TG_DTYPE
  }
  return "?";
}

bool from_st_dtype(const std::string& s, ScalarType* t) {
  for (int i = 0; i < kNumScalarTypes; ++i)
    if (const char* name = st_dtype(ScalarType(i)); name && s == name) {
      *t = ScalarType(i);
      return true;
    }
  return false;
}

// Files are untrusted (checkpoints are downloaded): every failure is a
// tg::Error naming the file, nothing is allocated for the tensors before
// the whole header is checked, and the JSON is bounded in size and depth.
constexpr uint64_t kMaxHeader = uint64_t(100) << 20;  // the format's own limit
constexpr int kMaxDepth = 8;                          // a valid header nests 3 deep

std::string read_file(const std::string& path) {
  std::error_code ec;
  TG_CHECK(std::filesystem::is_regular_file(path, ec), "load_safetensors: '", path, "' is ",
           std::filesystem::exists(path, ec) ? "not a regular file" : "not there");
  std::ifstream f(path, std::ios::binary);
  TG_CHECK(f.good(), "load_safetensors: cannot open '", path, "'");
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  TG_CHECK(!f.bad(), "load_safetensors: reading '", path, "' failed");
  return bytes;
}

// The deepest nesting of arrays and objects in `json` (strings skipped),
// without recursion: the parser never sees a header nested deeper than
// kMaxDepth.
int json_depth(const char* p, const char* end) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (; p < end; ++p) {
    const char c = *p;
    if (in_string) {
      if (c == '\\') ++p;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

// The header of the file's bytes, checked: its JSON and where the data starts.
Json parse_header(const std::string& path, const std::string& bytes, size_t* data_start) {
  TG_CHECK(bytes.size() >= 8, "load_safetensors: '", path, "' is ", bytes.size(),
           " bytes long, shorter than the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i)
    n = (n << 8) | uint8_t(bytes[size_t(i)]);
  TG_CHECK(n <= bytes.size() - 8, "load_safetensors: '", path, "' declares a header of ", n, " bytes but holds only ",
           bytes.size() - 8, " after the length");
  TG_CHECK(n <= kMaxHeader, "load_safetensors: the header of '", path, "' is ", n, " bytes, more than the ", kMaxHeader,
           " the format allows");
  *data_start = 8 + size_t(n);
  const char* first = bytes.data() + 8;
  TG_CHECK(json_depth(first, first + n) <= kMaxDepth, "load_safetensors: the header of '", path,
           "' nests arrays or objects deeper than ", kMaxDepth, " levels; a safetensors header nests 3");
  Json h;
  try {
    h = Json::parse(first, first + n);
  } catch (const std::exception& e) {
    TG_ERROR("load_safetensors: the header of '", path, "' is not valid JSON: ", e.what());
  }
  TG_CHECK(h.is_object(), "load_safetensors: the header of '", path, "' is not a JSON object");
  return h;
}

// __metadata__: a map of strings to strings, or absent.
Metadata read_metadata(const std::string& path, const Json& h) {
  Metadata m;
  if (!h.contains("__metadata__")) return m;
  const Json& md = h["__metadata__"];
  TG_CHECK(md.is_object(), "load_safetensors: '__metadata__' in '", path, "' is not a map of strings");
  for (auto it = md.begin(); it != md.end(); ++it) {
    TG_CHECK(it.value().is_string(), "load_safetensors: '__metadata__' entry '", it.key(), "' in '", path,
             "' is not a string");
    m.emplace_back(it.key(), it.value().get<std::string>());
  }
  return m;
}

struct Entry {
  std::string name;
  ScalarType dtype;
  IntList shape;
  uint64_t begin, end;
};

// Every entry, checked against the format and the file (types, dtype,
// shape, integral offsets that tile the data exactly) before anything is
// allocated.
std::vector<Entry> read_entries(const std::string& path, const Json& h, uint64_t buffer) {
  std::vector<Entry> entries;
  for (auto it = h.begin(); it != h.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const std::string& name = it.key();
    const Json& e = it.value();
    auto where = [&] { return "load_safetensors: '" + name + "' in '" + path + "'"; };
    TG_CHECK(e.is_object() && e.contains("dtype") && e.contains("shape") && e.contains("data_offsets"),
             "load_safetensors: the entry '", name, "' of '", path, "' needs dtype, shape and data_offsets");
    Entry en{name, kFloat32, {}, 0, 0};
    TG_CHECK(e["dtype"].is_string(), where(), " has a dtype that is not a string: ", e["dtype"].dump());
    const std::string ds = e["dtype"].get<std::string>();
    TG_CHECK(from_st_dtype(ds, &en.dtype), where(), " has dtype ", ds,
             ", which tapegrad does not support (F64, F32, F16, BF16, I64, BOOL)");
    const Json& shape = e["shape"];
    TG_CHECK(shape.is_array(), where(), " has a shape that is not a list of sizes: ", shape.dump());
    int64_t numel = 1;
    for (const auto& d : shape) {
      TG_CHECK(d.is_number_unsigned() && d.get<uint64_t>() <= uint64_t(INT64_MAX), where(), " has a bad shape ",
               shape.dump());
      en.shape.push_back(d.get<int64_t>());
      TG_CHECK(!__builtin_mul_overflow(numel, en.shape.back(), &numel), where(), " has a shape ", shape.dump(),
               " with more elements than fit in 64 bits");
    }
    const Json& off = e["data_offsets"];
    TG_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), where(),
             " needs data_offsets [begin, end] of two non-negative integers, got ", off.dump());
    en.begin = off[0].get<uint64_t>();
    en.end = off[1].get<uint64_t>();
    uint64_t want = 0;
    TG_CHECK(!__builtin_mul_overflow(uint64_t(numel), uint64_t(element_size(en.dtype)), &want), where(),
             " has a shape ", shape.dump(), " whose bytes do not fit in 64 bits");
    TG_CHECK(en.begin <= en.end && en.end <= buffer && en.end - en.begin == want, where(), " has data_offsets [",
             en.begin, ", ", en.end, "] but its ", ds, " ", shape_str(en.shape), " needs ", want, " bytes within the ",
             buffer, "-byte buffer");
    entries.push_back(std::move(en));
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const Entry& e : entries)
    ranges.emplace_back(e.begin, e.end);
  std::sort(ranges.begin(), ranges.end());
  uint64_t at = 0;
  for (const auto& [b, e] : ranges) {
    TG_CHECK(b == at, "load_safetensors: the tensors of '", path, "' ", b < at ? "overlap" : "leave a hole",
             " at byte ", std::min(b, at), " of the buffer");
    at = e;
  }
  TG_CHECK(at == buffer, "load_safetensors: '", path, "' has ", buffer - at, " bytes after its last tensor");
  return entries;
}

// Writes `header` and the tensors' bytes to `f`; false on any failure.
bool write_all(std::ofstream& f, const std::string& header, const std::vector<Tensor>& host) {
  const uint64_t n = header.size();
  char len[8];
  for (int i = 0; i < 8; ++i)
    len[i] = char((n >> (8 * i)) & 0xff);
  f.write(len, 8);
  f.write(header.data(), std::streamsize(header.size()));
  for (const Tensor& c : host)
    if (c.numel() > 0)
      f.write(static_cast<const char*>(c.data_ptr()), std::streamsize(c.numel() * int64_t(element_size(c.dtype()))));
  f.flush();
  const bool ok = f.good();
  f.close();
  return ok && !f.fail();
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors, const Metadata& metadata) {
  std::set<std::string> names;
  for (const auto& [n, t] : tensors) {
    TG_CHECK(n != "__metadata__", "save_safetensors: '__metadata__' is reserved and cannot name a tensor");
    TG_CHECK(names.insert(n).second, "save_safetensors: the name '", n, "' appears twice");
    TG_CHECK(t.defined(), "save_safetensors: '", n, "' is an undefined tensor");
    TG_CHECK(st_dtype(t.dtype()), "save_safetensors: '", n, "' is ", t.dtype(),
             ", which the safetensors format has no dtype for; save view_as_real(t) (its real and imaginary parts "
             "as a last dim of 2) and view_as_complex it after loading");
    TG_CHECK(!t.is_sparse(), "save_safetensors: '", n,
             "' is a sparse tensor; save to_dense() or its indices and values");
  }
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i)
    order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    size_t ea = element_size(tensors[a].second.dtype()), eb = element_size(tensors[b].second.dtype());
    return ea != eb ? ea > eb : tensors[a].first < tensors[b].first;
  });
  Json h = Json::object();
  if (!metadata.empty()) {
    Json m = Json::object();
    for (const auto& [k, v] : metadata)
      m[k] = v;
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
  std::string header;
  try {
    header = h.dump();
  } catch (const std::exception& e) {  // a name or metadata that is not UTF-8
    TG_ERROR("save_safetensors: '", path, "': the names and metadata must be UTF-8 (", e.what(), ")");
  }
  header.append((8 - header.size() % 8) % 8, ' ');
  // A regular file is written beside the target and renamed over it, so a
  // failed save never leaves a truncated checkpoint in its place; anything
  // else (a pipe, a device) is written in place.
  std::error_code ec;
  const bool in_place = std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec);
  const std::string target = in_place ? path : path + ".tmp." + std::to_string(::getpid());
  std::ofstream f(target, std::ios::binary | std::ios::trunc);
  TG_CHECK(f.good(), "save_safetensors: cannot open '", target, "' for writing");
  if (!write_all(f, header, host)) {
    if (!in_place) std::remove(target.c_str());
    TG_ERROR("save_safetensors: writing '", path, "' failed (disk full, or the file system refused the write)",
             in_place ? "" : "; the file there before, if any, is unchanged");
  }
  if (!in_place && std::rename(target.c_str(), path.c_str()) != 0) {
    std::remove(target.c_str());
    TG_ERROR("save_safetensors: could not move the written file to '", path, "'");
  }
}

NamedTensors load_safetensors(const std::string& path, Device device) {
  const std::string bytes = read_file(path);
  size_t start = 0;
  const Json h = parse_header(path, bytes, &start);
  std::vector<Entry> entries;
  try {
    (void)read_metadata(path, h);
    entries = read_entries(path, h, bytes.size() - start);
  } catch (const nlohmann::json::exception& e) {  // a check above missed a type: still the file's fault
    TG_ERROR("load_safetensors: the header of '", path, "' is malformed: ", e.what());
  }
  NamedTensors out;
  for (const Entry& e : entries) {
    const uint64_t n = e.end - e.begin;
    const char* src = bytes.data() + start + e.begin;
    if (e.dtype == kBool)
      for (uint64_t i = 0; i < n; ++i)
        TG_CHECK(uint8_t(src[i]) <= 1, "load_safetensors: BOOL tensor '", e.name, "' in '", path, "' holds byte ",
                 int(uint8_t(src[i])), " at element ", i, "; safetensors BOOL bytes are 0 or 1");
    Tensor t = tg::empty(e.shape, TensorOptions().dtype(e.dtype));
    if (n) std::memcpy(t.data_ptr(), src, n);
    out.emplace_back(e.name, device.is_cpu() ? t : t.to(device));
  }
  return out;
}

Metadata load_safetensors_metadata(const std::string& path) {
  const std::string bytes = read_file(path);
  size_t start = 0;
  const Json h = parse_header(path, bytes, &start);
  try {
    return read_metadata(path, h);
  } catch (const nlohmann::json::exception& e) {
    TG_ERROR("load_safetensors_metadata: the header of '", path, "' is malformed: ", e.what());
  }
}

void save(const Module& module, const std::string& path) { save_safetensors(path, module.state_dict()); }

void load(Module& module, const std::string& path, bool strict) {
  module.load_state_dict(load_safetensors(path), strict);
}

}  // namespace tg::nn
