// Runs a libFuzzer-style target (LLVMFuzzerTestOneInput) without libFuzzer,
// so that CI fuzzes under GCC's ASan+UBSan too: every seed of the corpus,
// then deterministic mutations of them (bit flips, interesting bytes and
// 64-bit integers, insertions, erasures, duplications, splices) for
// TG_FUZZ_SECONDS seconds or, by default, TG_FUZZ_RUNS inputs (300). The
// same seeds and run count give the same inputs on every machine; a crash or
// sanitizer report names the input's number, and TG_FUZZ_DUMP=file writes
// each input there before it runs (the last one is the culprit).
//   fuzz_<target> <corpus dir>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

struct Rng {  // splitmix64
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : size_t(next() % n); }
};

constexpr size_t kMaxSize = 1 << 16;

void mutate(Bytes& b, const std::vector<Bytes>& seeds, Rng& r) {
  static const uint8_t kBytes[] = {0, 1, 2, 0x7f, 0x80, 0xff, '"', '[', ']', '{', '}', ',', ':', '0', '9', '-'};
  static const int64_t kInts[] = {0,
                                  1,
                                  -1,
                                  2,
                                  8,
                                  255,
                                  65536,
                                  int64_t(1) << 31,
                                  int64_t(1) << 32,
                                  int64_t(1) << 62,
                                  INT64_MAX,
                                  INT64_MIN,
                                  -(int64_t(1) << 32)};
  const int n = 1 + int(r.below(4));
  for (int k = 0; k < n; ++k) {
    switch (r.below(8)) {
      case 0:  // flip a bit
        if (!b.empty()) b[r.below(b.size())] ^= uint8_t(1u << r.below(8));
        break;
      case 1:  // an interesting byte
        if (!b.empty()) b[r.below(b.size())] = kBytes[r.below(sizeof kBytes)];
        break;
      case 2: {  // an interesting 64-bit integer, little-endian
        if (b.size() < 8) break;
        const int64_t v = kInts[r.below(sizeof kInts / sizeof kInts[0])];
        std::memcpy(&b[r.below(b.size() - 7)], &v, 8);
        break;
      }
      case 3: {  // insert random bytes
        const size_t at = r.below(b.size() + 1), len = 1 + r.below(16);
        Bytes ins(len);
        for (auto& c : ins)
          c = uint8_t(r.next());
        b.insert(b.begin() + std::ptrdiff_t(at), ins.begin(), ins.end());
        break;
      }
      case 4: {  // erase a range
        if (b.empty()) break;
        const size_t at = r.below(b.size()), len = 1 + r.below(std::min<size_t>(b.size() - at, 32));
        b.erase(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + len));
        break;
      }
      case 5: {  // duplicate a range
        if (b.empty()) break;
        const size_t at = r.below(b.size()), len = 1 + r.below(std::min<size_t>(b.size() - at, 64));
        const Bytes part(b.begin() + std::ptrdiff_t(at), b.begin() + std::ptrdiff_t(at + len));
        b.insert(b.begin() + std::ptrdiff_t(r.below(b.size() + 1)), part.begin(), part.end());
        break;
      }
      case 6: {  // splice with another seed
        const Bytes& o = seeds[r.below(seeds.size())];
        if (o.empty()) break;
        const size_t cut = r.below(b.size() + 1), from = r.below(o.size());
        b.resize(cut);
        b.insert(b.end(), o.begin() + std::ptrdiff_t(from), o.end());
        break;
      }
      default:  // truncate
        b.resize(r.below(b.size() + 1));
        break;
    }
  }
  if (b.size() > kMaxSize) b.resize(kMaxSize);
}

// An input that takes seconds is a finding too (a hostile input that hangs
// the process): TG_FUZZ_SLOW_SECONDS (default 5) aborts past it.
void run(const Bytes& b, const char* dump, long number, double slow) {
  if (dump) {
    std::ofstream f(dump, std::ios::binary | std::ios::trunc);
    f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
  }
  const auto t0 = std::chrono::steady_clock::now();
  LLVMFuzzerTestOneInput(b.data(), b.size());
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (s > slow) {
    std::fprintf(stderr, "finding: input %ld (%zu bytes) took %.1f s (TG_FUZZ_DUMP=file keeps it)\n", number, b.size(),
                 s);
    std::abort();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Bytes> seeds;
  if (argc > 1) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::directory_iterator(argv[1]))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& p : files) {
      std::ifstream f(p, std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) seeds.emplace_back();
  const char* dump = std::getenv("TG_FUZZ_DUMP");
  const char* sec = std::getenv("TG_FUZZ_SECONDS");
  const char* runs_env = std::getenv("TG_FUZZ_RUNS");
  const char* slow_env = std::getenv("TG_FUZZ_SLOW_SECONDS");
  const double slow = slow_env ? std::atof(slow_env) : 5.0;
  const double seconds = sec ? std::atof(sec) : 0.0;
  const long max_runs = runs_env ? std::atol(runs_env) : 300;
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  long runs = 0;
  for (const Bytes& s : seeds) {
    run(s, dump, runs, slow);
    ++runs;
  }
  Rng r{0x7a9e6ad};
  for (;; ++runs) {
    if (seconds > 0 ? elapsed() >= seconds : runs >= max_runs) break;
    Bytes b = seeds[r.below(seeds.size())];
    mutate(b, seeds, r);
    run(b, dump, runs, slow);
  }
  std::printf("%s: %ld inputs (%zu seeds) in %.1f s, no finding\n", argv[0], runs, seeds.size(), elapsed());
  return 0;
}
