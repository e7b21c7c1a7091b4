// Fuzz target: the safetensors reader (files are untrusted: downloaded
// checkpoints). Every input is a file; reading it either gives tensors that
// are read back whole, or a tg::Error. Any other exception, a crash or a
// sanitizer report is a finding.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "fuzz_util.h"
#include <tapegrad/tapegrad.h>

namespace {
const std::string& scratch() {
  static const std::string path =
      (std::filesystem::temp_directory_path() / ("tg_fuzz_safetensors_" + std::to_string(::getpid()))).string();
  return path;
}
// The scratch file is removed at exit. Its path is made first (statics are
// destroyed in reverse order: the path outlives the cleanup; made on first
// use instead, it was destroyed before the cleanup read it, and the file
// stayed behind).
struct Cleanup {
  Cleanup() { (void)scratch(); }
  ~Cleanup() { std::remove(scratch().c_str()); }
} cleanup;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  {
    std::ofstream f(scratch(), std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(data), std::streamsize(size));
  }
  try {
    for (const auto& [name, t] : tg::nn::load_safetensors(scratch())) {
      if (t.numel() == 0) continue;
      // Every element read: the sanitizers see a tensor that outruns its bytes.
      if (t.dtype() == tg::kBool) (void)t.to(tg::kInt64).sum().item<int64_t>();
      else (void)t.to(tg::kFloat64).sum().item<double>();
      (void)name.size();
    }
  } catch (const tg::Error&) {
  } catch (const std::exception& e) {
    tgfuzz::finding("fuzz_safetensors", e.what());
  }
  try {
    (void)tg::nn::load_safetensors_metadata(scratch());
  } catch (const tg::Error&) {
  } catch (const std::exception& e) {
    tgfuzz::finding("fuzz_safetensors", e.what());
  }
  return 0;
}
