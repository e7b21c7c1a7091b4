// nn (docs/NN.md): modules, their parameters and state, placement, and the
// safetensors format against a file written by hand to the published layout.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "reference.h"
#include "autograd/fused_mlp.h"
#include "tensor/env.h"

namespace {

using tg::Tensor;
namespace nn = tg::nn;
namespace ag = tg::autograd;

std::vector<std::string> names(const nn::NamedTensors& nt) {
  std::vector<std::string> v;
  for (const auto& e : nt)
    v.push_back(e.first);
  return v;
}

// The tuning knobs' parser (tensor/env.h; here beside the fused MLP's
// switch, the other reader of that header in the tests).
TEST(Env, KnobNumbersAreNonNegativeDecimalsOrTheDefault) {
  const char* name = "TG_TEST_ENV_NUMBER";
  auto read = [&](const char* v) {
    v ? (void)::setenv(name, v, 1) : (void)::unsetenv(name);
    return tg::detail::env_number(name, -7.0);
  };
  EXPECT_EQ(read(nullptr), -7.0);
  EXPECT_EQ(read(""), -7.0);
  EXPECT_EQ(read("4194304"), 4194304.0);
  EXPECT_EQ(read("1e9"), 1e9);
  EXPECT_EQ(read("0.5"), 0.5);
  EXPECT_EQ(read("0"), 0.0);
  for (const char* bad : {"-1", "+5", " 5", "5 ", "5x", "0x10", "1e400", "inf", "nan", "abc", "1,000"})
    EXPECT_EQ(read(bad), -7.0) << "'" << bad << "'";
  ::unsetenv(name);
}

TEST(NN, MlpRegistersItsLayersAndComputesTheComposition) {
  tg::manual_seed(3);
  auto mlp = nn::MLP({2, 8, 8, 1}, "tanh", tg::TensorOptions().dtype(tg::kFloat64));
  EXPECT_EQ(mlp->size(), 5u);
  EXPECT_EQ(names(mlp->named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"}));
  EXPECT_TRUE(mlp->named_parameters(/*recurse=*/false).empty());
  EXPECT_EQ(mlp->children().size(), 5u);
  Tensor x = tg::randn({5, 2}, tg::TensorOptions().dtype(tg::kFloat64));
  auto p = mlp->parameters();
  Tensor ref = tg::linear(tg::tanh(tg::linear(tg::tanh(tg::linear(x, p[0], p[1])), p[2], p[3])), p[4], p[5]);
  Tensor y = (*mlp)(x);
  EXPECT_EQ(y.sizes(), (tg::IntList{5, 1}));
  EXPECT_TRUE(tg::equal(y, ref));
  // Gradients reach every parameter.
  y.sum().backward();
  for (const auto& [n, t] : mlp->named_parameters())
    EXPECT_TRUE(t.grad().defined()) << n;
  mlp->zero_grad(/*set_to_none=*/false);
  for (const Tensor& t : mlp->parameters())
    EXPECT_EQ(tg::amax(tg::abs(t.grad())).item<double>(), 0.0);
  mlp->zero_grad();
  for (const Tensor& t : mlp->parameters())
    EXPECT_FALSE(t.grad().defined());
  std::vector<std::string> mods;
  for (const auto& e : mlp->named_modules())
    mods.push_back(e.first);
  EXPECT_EQ(mods, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  std::ostringstream printed;
  printed << *nn::MLP({2, 3, 1});
  EXPECT_EQ(printed.str(),
            "Sequential (\n  (0): Linear(in_features=2, out_features=3, bias=true)\n  (1): Tanh\n"
            "  (2): Linear(in_features=3, out_features=1, bias=true)\n)");
  EXPECT_ERROR_CONTAINS(nn::MLP({2, 4}, "swish"), "unknown activation 'swish'");
  EXPECT_ERROR_CONTAINS(nn::MLP({2}), "at least the input and output sizes");
}

// Initialisers: bounds and moments from their formulas, reproducible from
// the seed, in place.
TEST(NN, InitialisersFollowTheirFormulas) {
  namespace init = tg::nn::init;
  auto o = tg::TensorOptions().dtype(tg::kFloat64);
  Tensor w = tg::empty({400, 300}, o);  // fan_in 300, fan_out 400
  const void* addr = w.data_ptr();
  tg::manual_seed(6);
  init::xavier_uniform_(w, 2.0);
  EXPECT_EQ(w.data_ptr(), addr);
  const double a = 2.0 * std::sqrt(6.0 / 700);
  EXPECT_LE(tg::amax(tg::abs(w)).item<double>(), a);
  EXPECT_NEAR(w.square().mean().item<double>(), a * a / 3, 0.02 * a * a / 3);  // variance of U(-a, a)
  Tensor w2 = tg::empty({400, 300}, o);
  tg::manual_seed(6);
  init::xavier_uniform_(w2, 2.0);
  EXPECT_TRUE(tg::equal(w, w2));
  init::kaiming_normal_(w, 0, "fan_out", "relu");
  EXPECT_NEAR(w.square().mean().item<double>(), 2.0 / 400, 0.02 * 2.0 / 400);
  EXPECT_NEAR(w.mean().item<double>(), 0.0, 0.01 * std::sqrt(2.0 / 400));
  init::kaiming_uniform_(w, std::sqrt(5.0));  // Linear's default: bound 1 / sqrt(fan_in)
  EXPECT_LE(tg::amax(tg::abs(w)).item<double>(), 1 / std::sqrt(300.0) + 1e-15);
  EXPECT_GT(tg::amax(tg::abs(w)).item<double>(), 0.99 / std::sqrt(300.0));
  init::xavier_normal_(w);
  EXPECT_NEAR(w.square().mean().item<double>(), 2.0 / 700, 0.02 * 2.0 / 700);
  init::constant_(w, 0.5);
  EXPECT_EQ(tg::amin(w).item<double>(), 0.5);
  EXPECT_EQ(init::calculate_gain("tanh"), 5.0 / 3);
  EXPECT_ERROR_CONTAINS(init::xavier_uniform_(tg::empty({3})), "at least 2 dimensions, got shape [3]");
  EXPECT_ERROR_CONTAINS(init::kaiming_normal_(w, 0, "fan_sideways"), "mode must be fan_in or fan_out");
  EXPECT_ERROR_CONTAINS(init::calculate_gain("swish"), "unknown nonlinearity 'swish'");
}

TEST(NN, LinearInitialisesAsLibTorchAndReproduciblyFromTheSeed) {
  tg::manual_seed(11);
  nn::Linear a(100, 30);
  tg::manual_seed(11);
  nn::Linear b(100, 30);
  EXPECT_TRUE(tg::equal(a->weight, b->weight));
  EXPECT_TRUE(tg::equal(a->bias, b->bias));
  const double bound = 0.1;  // 1 / sqrt(100)
  EXPECT_LE(tg::amax(tg::abs(a->weight)).item<double>(), bound);
  EXPECT_GT(tg::amax(tg::abs(a->weight)).item<double>(), 0.9 * bound);
  EXPECT_TRUE(a->weight.requires_grad() && a->weight.is_leaf());
  nn::Linear nobias(4, 3, /*bias=*/false);
  EXPECT_FALSE(nobias->bias.defined());
  EXPECT_EQ(names(nobias->named_parameters()), std::vector<std::string>{"weight"});
  EXPECT_ERROR_CONTAINS(nn::Linear(0, 3), "must be positive");
}

TEST(NN, StateDictRoundTripsAndLoadNamesWhatDoesNotMatch) {
  tg::manual_seed(1);
  auto a = nn::MLP({3, 5, 2});
  tg::manual_seed(2);
  auto b = nn::MLP({3, 5, 2});
  EXPECT_FALSE(tg::equal(a->parameters()[0], b->parameters()[0]));
  const void* addr = b->parameters()[0].data_ptr();
  b->load_state_dict(a->state_dict());
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_TRUE(tg::equal(a->parameters()[i], b->parameters()[i]));
  EXPECT_EQ(b->parameters()[0].data_ptr(), addr);  // copied in place
  nn::NamedTensors sd = a->state_dict();
  sd.pop_back();
  sd.emplace_back("extra", tg::zeros({1}));
  EXPECT_ERROR_CONTAINS(b->load_state_dict(sd), "missing '2.bias', unexpected 'extra'");
  b->load_state_dict(sd, /*strict=*/false);  // the matching ones
  nn::NamedTensors bad = a->state_dict();
  bad[0].second = tg::zeros({4, 4});
  EXPECT_ERROR_CONTAINS(b->load_state_dict(bad), "size mismatch for '0.weight'");
}

// A module keeps its own handles (Linear::weight): to() moves the data under
// them, as LibTorch's set_data does, gradients included.
TEST(NN, ToCastsInPlaceUnderTheModulesOwnHandles) {
  tg::manual_seed(4);
  auto lin = std::make_shared<nn::LinearImpl>(3, 2);
  Tensor handle = lin->weight;
  (*lin)(tg::ones({1, 3})).sum().backward();
  lin->to(tg::kFloat64);
  EXPECT_EQ(handle.dtype(), tg::kFloat64);
  EXPECT_EQ(lin->weight.dtype(), tg::kFloat64);
  EXPECT_EQ(lin->weight.grad().dtype(), tg::kFloat64);
  EXPECT_TRUE(lin->weight.requires_grad());
  Tensor y = (*lin)(tg::ones({1, 3}, tg::TensorOptions().dtype(tg::kFloat64)));
  EXPECT_EQ(y.dtype(), tg::kFloat64);
  EXPECT_ERROR_CONTAINS(lin->to(tg::kInt64), "floating-point dtypes");
  if (tg::cuda::is_available()) {
    lin->to(tg::Device(tg::kCUDA, 0));
    EXPECT_TRUE(handle.is_cuda());
    EXPECT_TRUE(lin->weight.grad().is_cuda());
  }
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A safetensors file built byte by byte from the published layout.
std::string hand_written_file() {
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F64","shape":[2,2],"data_offsets":[0,32]},)"
      R"("b":{"dtype":"F32","shape":[3],"data_offsets":[32,44]}})";
  std::string padded = header + std::string((8 - header.size() % 8) % 8, ' ');
  std::string out;
  uint64_t n = padded.size();
  for (int i = 0; i < 8; ++i)
    out.push_back(char((n >> (8 * i)) & 0xff));
  out += padded;
  const double w[4] = {1.5, -2.0, 0.25, 1e300};
  const float b[3] = {3.0f, -0.5f, 7.0f};
  out.append(reinterpret_cast<const char*>(w), sizeof w);
  out.append(reinterpret_cast<const char*>(b), sizeof b);
  return out;
}

TEST(NN, SafetensorsMatchesAFileWrittenByHandByteForByte) {
  const std::string path = ::testing::TempDir() + "tapegrad_nn_hand.safetensors";
  const std::string ours = ::testing::TempDir() + "tapegrad_nn_ours.safetensors";
  { std::ofstream(path, std::ios::binary) << hand_written_file(); }
  nn::NamedTensors t = nn::load_safetensors(path);
  ASSERT_EQ(names(t), (std::vector<std::string>{"w", "b"}));
  EXPECT_EQ(t[0].second.dtype(), tg::kFloat64);
  EXPECT_EQ(t[0].second.sizes(), (tg::IntList{2, 2}));
  EXPECT_EQ(tgtest::values(t[0].second), (std::vector<double>{1.5, -2.0, 0.25, 1e300}));
  EXPECT_EQ(t[1].second.dtype(), tg::kFloat32);
  EXPECT_EQ(tgtest::values(t[1].second), (std::vector<double>{3.0, -0.5, 7.0}));
  EXPECT_EQ(nn::load_safetensors_metadata(path), (nn::Metadata{{"format", "pt"}}));
  // Written back, given in another order and one of them strided: the same bytes.
  nn::NamedTensors again{{"b", t[1].second}, {"w", t[0].second.t().contiguous().t()}};
  nn::save_safetensors(ours, again, {{"format", "pt"}});
  EXPECT_EQ(file_bytes(ours), hand_written_file());
  std::remove(path.c_str());
  std::remove(ours.c_str());
}

TEST(NN, SafetensorsRoundTripsEveryDtypeAndRejectsBadFiles) {
  const std::string path = ::testing::TempDir() + "tapegrad_nn_rt.safetensors";
  nn::NamedTensors in;
  for (tg::ScalarType dt : {tg::kFloat64, tg::kFloat32, tg::kFloat16, tg::kBFloat16, tg::kInt64, tg::kBool})
    in.emplace_back(std::string("t_") + tg::to_string(dt), (tg::randn({3, 4}) * 4.0).to(dt));
  in.emplace_back("empty", tg::zeros({0, 5}));
  in.emplace_back("scalar", tg::full({}, 2.5));
  nn::save_safetensors(path, in);
  nn::NamedTensors out = nn::load_safetensors(path);
  ASSERT_EQ(out.size(), in.size());
  for (const auto& [n, t] : in) {
    auto it = std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == n; });
    ASSERT_NE(it, out.end()) << n;
    EXPECT_EQ(it->second.dtype(), t.dtype()) << n;
    EXPECT_TRUE(tg::equal(it->second, t)) << n;
  }
  // A module through a file.
  tg::manual_seed(8);
  auto a = nn::MLP({2, 6, 1});
  nn::save(*a, path);
  tg::manual_seed(9);
  auto b = nn::MLP({2, 6, 1});
  nn::load(*b, path);
  for (size_t i = 0; i < a->parameters().size(); ++i)
    EXPECT_TRUE(tg::equal(a->parameters()[i], b->parameters()[i]));
  // Bad files name themselves and what is wrong.
  std::string good = hand_written_file();
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; };
  write(good.substr(0, 5));
  EXPECT_ERROR_CONTAINS(nn::load_safetensors(path), "shorter than the 8-byte header length");
  write(good.substr(0, good.size() - 4));
  EXPECT_ERROR_CONTAINS(nn::load_safetensors(path), "'b' in '" + path + "' has data_offsets [32, 44]");
  std::string overlap = good;
  overlap.replace(overlap.find("[32,44]"), 7, "[28,40]");
  write(overlap + std::string(4, '\0'));
  EXPECT_ERROR_CONTAINS(nn::load_safetensors(path), "overlap");
  std::string i32 = good;
  i32.replace(i32.find("\"F32\""), 5, "\"I32\"");
  write(i32);
  EXPECT_ERROR_CONTAINS(nn::load_safetensors(path), "has dtype I32, which tapegrad does not support");
  EXPECT_ERROR_CONTAINS(nn::save_safetensors(path, {{"a", tg::zeros({1})}, {"a", tg::zeros({1})}}),
                        "the name 'a' appears twice");
  std::remove(path.c_str());
}

// Hostile files (checkpoints are downloaded): each is a tg::Error naming the
// file, checked before any tensor memory is allocated — a deep header was a
// stack overflow, overlapping entries allocated gigabytes first, wrong types
// threw nlohmann's exceptions, lenient parses accepted nonsense.
TEST(NN, SafetensorsRefusesHostileFiles) {
  const std::string path = ::testing::TempDir() + "tapegrad_nn_hostile.safetensors";
  auto file = [](const std::string& header, const std::string& data) {
    std::string h = header;
    h.append((8 - h.size() % 8) % 8, ' ');
    std::string out;
    const uint64_t n = h.size();
    for (int i = 0; i < 8; ++i)
      out.push_back(char((n >> (8 * i)) & 0xff));
    return out + h + data;
  };
  auto write = [&](const std::string& bytes) { std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes; };
  auto expect = [&](const std::string& header, const std::string& data, const std::string& text) {
    write(file(header, data));
    EXPECT_ERROR_CONTAINS(nn::load_safetensors(path), text);
  };
  // 100,000 nested arrays (200 KB): refused before parsing.
  expect(std::string(100000, '[') + std::string(100000, ']'), "", "deeper than 8 levels");
  write(file("{\"__metadata__\": " + std::string(50000, '[') + std::string(50000, ']') + "}", ""));
  EXPECT_ERROR_CONTAINS(nn::load_safetensors_metadata(path), "deeper than 8 levels");
  // 1000 entries claiming the same 8 MiB: the tiling check comes first.
  std::string many = "{";
  for (int i = 0; i < 1000; ++i)
    many += (i ? "," : "") + std::string("\"t") + std::to_string(i) +
            "\":{\"dtype\":\"F64\",\"shape\":[1048576],"
            "\"data_offsets\":[0,8388608]}";
  many += "}";
  expect(many, std::string(8388608, '\0'), "overlap");
  // Wrong types and lenient values.
  const std::string data8(8, '\0');
  expect(R"({"x":{"dtype":5,"shape":[1],"data_offsets":[0,8]}})", data8,
         "'x' in '" + path + "' has a dtype that is not a string");
  expect(R"({"x":{"dtype":"F64","shape":null,"data_offsets":[0,8]}})", data8,
         "has a shape that is not a list of sizes: null");
  expect(R"({"x":{"dtype":"F64","shape":2,"data_offsets":[0,8]}})", data8,
         "has a shape that is not a list of sizes: 2");
  expect(R"({"x":{"dtype":"F64","shape":{"x":2},"data_offsets":[0,8]}})", data8, "has a shape that is not a list");
  expect(R"({"x":{"dtype":"F64","shape":[1.5],"data_offsets":[0,8]}})", data8, "has a bad shape [1.5]");
  expect(R"({"x":{"dtype":"F64","shape":[-1],"data_offsets":[0,8]}})", data8, "has a bad shape [-1]");
  expect(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0.5,8.7]}})", data8,
         "needs data_offsets [begin, end] of two non-negative integers, got [0.5,8.7]");
  expect(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":"0-8"}})", data8, "needs data_offsets");
  expect(R"({"x":{"dtype":"F64","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", data8,
         "with more elements than fit in 64 bits");
  expect(R"({"x":[1,2]})", data8, "the entry 'x' of '" + path + "' needs dtype, shape and data_offsets");
  expect(R"({"__metadata__":{"a":1},"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8,
         "'__metadata__' entry 'a' in '" + path + "' is not a string");
  expect(R"({"__metadata__":[1],"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8,
         "'__metadata__' in '" + path + "' is not a map of strings");
  // BOOL bytes other than 0 and 1.
  expect(R"({"b":{"dtype":"BOOL","shape":[4],"data_offsets":[0,4]}})", std::string("\x02\xff\x01\x00", 4),
         "BOOL tensor 'b' in '" + path + "' holds byte 2 at element 0");
  // Not a file.
  EXPECT_ERROR_CONTAINS(nn::load_safetensors(::testing::TempDir()), "is not a regular file");
  // The good file still loads after all that.
  write(file(R"({"x":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})", data8));
  EXPECT_EQ(nn::load_safetensors(path).size(), 1u);
  // Saving: a failed write is an error (it reported success on a full
  // disk), non-UTF-8 names are refused, and a save leaves no temporary file.
  if (std::ifstream("/dev/full").good())
    EXPECT_ERROR_CONTAINS(nn::save_safetensors("/dev/full", {{"w", tg::ones({1024})}}), "writing '/dev/full' failed");
  EXPECT_ERROR_CONTAINS(nn::save_safetensors(path, {{std::string("bad\xff"), tg::ones({1})}}), "must be UTF-8");
  EXPECT_EQ(nn::load_safetensors(path).size(), 1u);  // the failed save left the file as it was
  nn::save_safetensors(path, {{"y", tg::ones({3})}});
  EXPECT_EQ(names(nn::load_safetensors(path)), (std::vector<std::string>{"y"}));
  for (const auto& entry : std::filesystem::directory_iterator(::testing::TempDir()))
    EXPECT_EQ(entry.path().filename().string().find("tapegrad_nn_hostile.safetensors.tmp"), std::string::npos);
  std::remove(path.c_str());
}

// A module tree stays acyclic: every registration path refuses a module that
// holds the registering one (today's recursion never ended), names the path,
// and leaves both modules as they were. Shared submodules (a DAG) stay allowed.
TEST(NN, AModuleRefusesToBecomeItsOwnDescendant) {
  struct Holder : nn::Module {
    Holder() : Module("Holder") {}
    void add(const std::string& name, std::shared_ptr<nn::Module> m) { register_module(name, std::move(m)); }
  };
  auto list = std::make_shared<nn::ModuleListImpl>();
  list->push_back(std::make_shared<nn::IdentityImpl>());
  EXPECT_ERROR_CONTAINS(list->push_back(list),
                        "ModuleList: registering the ModuleList '1' would make this ModuleList its own descendant "
                        "(it is '1' below itself)");
  EXPECT_EQ(list->size(), 1u);
  list->push_back(std::make_shared<nn::TanhImpl>());  // still usable, under the same next name
  EXPECT_EQ(list->named_modules().size(), 2u);
  EXPECT_EQ(list->named_children()[1].first, "1");

  auto outer = std::make_shared<nn::ModuleDictImpl>(), inner = std::make_shared<nn::ModuleDictImpl>();
  outer->insert("inner", inner);
  EXPECT_ERROR_CONTAINS(inner->insert("back", outer),
                        "ModuleDict: registering the ModuleDict 'back' would make this ModuleDict its own descendant "
                        "(it is 'back.inner' below itself)");
  EXPECT_FALSE(inner->contains("back"));
  EXPECT_EQ(inner->size(), 0u);
  EXPECT_TRUE(inner->named_children().empty());
  inner->insert("back", std::make_shared<nn::IdentityImpl>());  // the key is still free
  EXPECT_EQ(outer->named_modules().size(), 2u);

  // register_module of an ancestor three levels up, and a Sequential into itself.
  auto a = std::make_shared<Holder>(), b = std::make_shared<Holder>();
  auto seq = std::make_shared<nn::SequentialImpl>();
  seq->push_back(b);
  a->add("seq", seq);
  EXPECT_ERROR_CONTAINS(b->add("up", a),
                        "Holder: registering the Holder 'up' would make this Holder its own descendant (it is "
                        "'up.seq.0' below itself)");
  EXPECT_ERROR_CONTAINS(b->add("me", b), "(it is 'me' below itself)");
  EXPECT_ERROR_CONTAINS(seq->push_back(seq), "Sequential: registering the Sequential '1'");
  EXPECT_EQ(seq->size(), 1u);
  std::ostringstream printed;
  printed << *a;
  EXPECT_EQ(printed.str(), "Holder (\n  (seq): Sequential (\n    (0): Holder\n  )\n)");
  a->train(false);
  EXPECT_FALSE(b->is_training());

  // The same module twice (shared weights) is no cycle, nor is a diamond of
  // 40 levels (each level's check visits each module once).
  auto lin = std::make_shared<nn::LinearImpl>(2, 2);
  auto twice = std::make_shared<Holder>();
  twice->add("x", lin);
  twice->add("y", lin);
  EXPECT_EQ(names(twice->named_parameters()), (std::vector<std::string>{"x.weight", "x.bias", "y.weight", "y.bias"}));
  auto bottom = std::make_shared<Holder>();
  std::shared_ptr<nn::Module> top = bottom;
  std::string path = "root.top";
  for (int level = 0; level < 40; ++level) {
    auto h = std::make_shared<Holder>();
    h->add("l", top);
    h->add("r", top);
    top = h;
    path += ".r";
  }
  auto root = std::make_shared<Holder>();
  root->add("top", top);
  EXPECT_ERROR_CONTAINS(bottom->add("root", root), "(it is '" + path + "' below itself)");
}

// Where nothing is recorded, nn::Sequential runs a small MLP of Linear
// layers and one activation kind on the GPU in one launch (its output the
// only allocation), with the values of the layers one by one; where
// something needs recording, or the modules are not such a chain, the
// layers run one by one.
TEST(NNGpu, SmallMlpsRunInOneLaunchWhereNothingIsRecorded) {
  REQUIRE_GPU();
  namespace cu = tg::cuda;
  const tg::Device gpu(tg::kCUDA, 0);
  const bool fused = tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlp>();
  struct Case {
    std::vector<int64_t> widths;
    std::string act;
    bool last_act, bias;
    tg::IntList batch;
  };
  const std::vector<Case> cases = {
      {{2, 64, 64, 2}, "tanh", false, true, {256}},
      {{3, 17, 5}, "relu", true, true, {7}},
      {{5, 33, 1}, "silu", false, false, {3, 37}},
      {{4, 64}, "sigmoid", true, true, {1}},
      {{1, 8, 8, 8, 8, 8, 8, 8, 1}, "tanh", false, true, {100}},
  };
  for (auto dtype : {tg::kFloat32, tg::kFloat64}) {
    for (const Case& c : cases) {
      auto seq = std::make_shared<nn::SequentialImpl>();
      auto o = tg::TensorOptions().dtype(dtype);
      for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
        seq->push_back(std::make_shared<nn::LinearImpl>(c.widths[i], c.widths[i + 1], c.bias, o));
        if (i + 2 < c.widths.size() || c.last_act) seq->push_back(nn::make_activation(c.act));
      }
      seq->to(gpu);
      tg::IntList shape = c.batch;
      shape.push_back(c.widths.front());
      Tensor x = (tg::rand(shape, o) * 4 - 2).to(gpu);
      // The layers one by one, as the ops compute them.
      Tensor want = x;
      for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
        const auto& l = static_cast<const nn::LinearImpl&>(*(*seq)[2 * i]);
        want = tg::linear(want, l.weight, l.bias);
        if (i + 2 < c.widths.size() || c.last_act) want = (*seq)[2 * i + 1]->forward(want);
      }
      std::ostringstream os;
      for (int64_t w : c.widths)
        os << w << " ";
      os << c.act << " " << dtype;
      const std::string what = os.str();
      ag::NoGradGuard no_grad;
      const int64_t allocs = cu::memory_stats().num_allocs;
      Tensor got = seq->forward(x);
      if (fused) EXPECT_EQ(cu::memory_stats().num_allocs - allocs, 1) << what << ": not one launch";
      else  // TG_FUSED_MLP=0: the layers one by one, an output each
        EXPECT_GT(cu::memory_stats().num_allocs - allocs, 1) << what << ": one launch with TG_FUSED_MLP=0";
      ASSERT_EQ(got.sizes(), want.sizes()) << what;
      const double tol = dtype == tg::kFloat32 ? 1e-6 : 1e-14;
      EXPECT_TRUE(tg::allclose(got, want, tol, tol)) << what << ": " << tg::max(tg::abs(got - want)).item<double>();
    }
  }
  nn::Sequential mlp = nn::MLP({2, 16, 3}, "tanh", tg::TensorOptions().dtype(tg::kFloat64));
  mlp->to(gpu);
  Tensor x = tg::rand({10, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(gpu);
  Tensor y = mlp->forward(x);  // recorded: the parameters need gradients
  EXPECT_TRUE(y.requires_grad());
  Tensor want;
  {
    ag::NoGradGuard no_grad;
    want = mlp->forward(x);
    // A non-contiguous input and one with no rows take the layers one by one.
    Tensor xt = tg::rand({2, 10}, tg::TensorOptions().dtype(tg::kFloat64)).to(gpu).t();
    EXPECT_TRUE(tg::allclose(mlp->forward(xt), mlp->forward(xt.contiguous()), 1e-14, 1e-14));
    EXPECT_EQ(mlp->forward(tg::zeros({0, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(gpu)).sizes(),
              (tg::IntList{0, 3}));
  }
  EXPECT_TRUE(tg::allclose(y.detach(), want, 1e-14, 1e-14));
  Tensor g = ag::grad({y.sum()}, {(*mlp)[0]->parameters()[0]})[0];
  EXPECT_EQ(g.sizes(), (tg::IntList{16, 2}));
  // Forward mode: the tangent goes through the layers one by one.
  {
    ag::NoGradGuard no_grad;
    ag::forward_ad::dual_level level;
    Tensor v = tg::ones({10, 2}, tg::TensorOptions().dtype(tg::kFloat64)).to(gpu);
    Tensor out = mlp->forward(ag::forward_ad::make_dual(x, v));
    Tensor tangent = ag::forward_ad::unpack_dual(out).tangent;
    ASSERT_TRUE(tangent.defined());
    const auto& l0 = static_cast<const nn::LinearImpl&>(*(*mlp)[0]);
    const auto& l1 = static_cast<const nn::LinearImpl&>(*(*mlp)[2]);
    Tensor z = tg::linear(x, l0.weight, l0.bias);
    Tensor dz = tg::matmul(v, l0.weight.t());
    Tensor want_t = tg::matmul(dz * (1 - tg::square(tg::tanh(z))), l1.weight.t());
    EXPECT_TRUE(tg::allclose(tangent, want_t, 1e-12, 1e-12));
  }
}

// Recorded, the same MLPs are one node (MlpBackward): the forward in one
// launch that saves the pre-activations, the backward in one for the input's
// and the pre-activations' gradients, the weights' as products. Values and
// gradients equal the layers one by one (f64), first and second derivatives
// pass gradcheck and gradgradcheck, a weight changed in place after the
// forward is refused, and TG_FUSED_MLP_RECORDED=0 gives the layers' nodes.
TEST(NNGpu, RecordedSmallMlpsAreOneNodeWithTheLayersGradients) {
  REQUIRE_GPU();
  const tg::Device gpu(tg::kCUDA, 0);
  const bool fused = tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlp>() &&
                     tg::detail::switched_on<tg::detail::OffSwitch::kFusedMlpRecorded>();
  struct Case {
    std::vector<int64_t> widths;
    std::string act;
    tg::Activation kind;
    bool last_act, bias;
    int64_t rows;
  };
  const std::vector<Case> cases = {
      {{2, 64, 64, 2}, "tanh", tg::Activation::Tanh, false, true, 256},
      {{3, 17, 5}, "relu", tg::Activation::Relu, true, true, 7},
      {{5, 33, 1}, "silu", tg::Activation::Silu, false, false, 9},
      {{4, 8, 8, 3}, "sigmoid", tg::Activation::Sigmoid, true, true, 5},
      {{3, 5}, "tanh", tg::Activation::Tanh, true, true, 6},
      {{1, 8, 8, 8, 8, 8, 8, 8, 1}, "tanh", tg::Activation::Tanh, false, true, 10},
  };
  const auto f64 = tg::TensorOptions().dtype(tg::kFloat64);
  tg::manual_seed(5);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.act + " " + std::to_string(c.rows) + " rows");
    auto seq = std::make_shared<nn::SequentialImpl>();
    std::vector<std::shared_ptr<nn::LinearImpl>> layers;
    for (size_t i = 0; i + 1 < c.widths.size(); ++i) {
      layers.push_back(std::make_shared<nn::LinearImpl>(c.widths[i], c.widths[i + 1], c.bias, f64));
      seq->push_back(layers.back());
      if (i + 2 < c.widths.size() || c.last_act) seq->push_back(nn::make_activation(c.act));
    }
    seq->to(gpu);
    std::vector<Tensor> params = seq->parameters();
    const Tensor x = (tg::rand({c.rows, c.widths.front()}, f64) * 4 - 2).to(gpu).requires_grad_();
    const Tensor w = tg::randn({c.rows, c.widths.back()}, f64).to(gpu);
    std::vector<Tensor> wrt = params;
    wrt.insert(wrt.begin(), x);
    // The layers one by one.
    auto layered = [&](const Tensor& in) {
      Tensor h = in;
      for (size_t i = 0; i < layers.size(); ++i) {
        h = tg::linear(h, layers[i]->weight, layers[i]->bias);
        if (i + 1 < layers.size() || c.last_act) h = (*seq)[2 * i + 1]->forward(h);
      }
      return h;
    };
    const Tensor y = seq->forward(x), want = layered(x);
    ASSERT_TRUE(y.grad_fn());
    if (fused) {
      EXPECT_EQ(y.grad_fn()->name(), "MlpBackward");
    } else {
      EXPECT_NE(y.grad_fn()->name(), "MlpBackward");
    }
    EXPECT_TRUE(tg::allclose(y.detach(), want.detach(), 1e-12, 1e-12));
    // First derivatives (the backward kernel: no fallback to the public-op
    // formulas), and second ones (the gradients' squares' gradients: the
    // formulas in public ops).
    const int64_t fallbacks = ag::fused_mlp_fallbacks();
    const std::vector<Tensor> g1 = ag::grad({(y * w).sum()}, wrt, {}, true);
    EXPECT_EQ(ag::fused_mlp_fallbacks(), fallbacks);
    // Some of the inputs only: x alone, each parameter alone.
    for (size_t k = 0; k < wrt.size(); ++k) {
      const Tensor one = ag::grad({(y * w).sum()}, {wrt[k]}, {}, true)[0];
      const Tensor want_one = ag::grad({(want * w).sum()}, {wrt[k]}, {}, true)[0];
      EXPECT_TRUE(tg::allclose(one, want_one, 1e-11, 1e-11)) << "gradient of input " << k << " alone";
    }
    EXPECT_EQ(ag::fused_mlp_fallbacks(), fallbacks);
    const std::vector<Tensor> g = ag::grad({(y * w).sum()}, wrt, {}, true, true);
    const std::vector<Tensor> gw = ag::grad({(want * w).sum()}, wrt, {}, true, true);
    Tensor s = g[0].square().sum(), sw = gw[0].square().sum();
    for (size_t i = 1; i < g.size(); ++i) {
      s = s + g[i].square().sum();
      sw = sw + gw[i].square().sum();
    }
    // (The last bias is unused there: the gradients do not depend on it.)
    const std::vector<Tensor> h = ag::grad({s}, wrt, {}, std::nullopt, false, true),
                              hw = ag::grad({sw}, wrt, {}, std::nullopt, false, true);
    for (size_t i = 0; i < wrt.size(); ++i) {
      EXPECT_TRUE(tg::allclose(g1[i], gw[i], 1e-11, 1e-11)) << "gradient " << i;
      EXPECT_TRUE(tg::allclose(g[i], gw[i], 1e-11, 1e-11)) << "gradient with create_graph " << i;
      ASSERT_EQ(h[i].defined(), hw[i].defined()) << "second derivative " << i;
      if (h[i].defined()) {
        EXPECT_TRUE(tg::allclose(h[i], hw[i], 1e-10, 1e-10)) << "second derivative " << i;
      }
    }
    // gradcheck and gradgradcheck of the node itself, in x and every
    // parameter (float64 CPU inputs, as gradcheck takes them, moved to the
    // GPU inside the function and its output back).
    auto fn = [&](const std::vector<Tensor>& v) {
      std::vector<Tensor> ws, bs;
      for (size_t l = 0; l < layers.size(); ++l) {
        ws.push_back(v[1 + (c.bias ? 2 : 1) * l].to(gpu));
        bs.push_back(c.bias ? v[2 + 2 * l].to(gpu) : Tensor());
      }
      Tensor out = ag::fused_mlp(c.kind, c.last_act, v[0].to(gpu), ws, bs);
      return out.defined() ? out.to(tg::Device(tg::kCPU)) : Tensor();
    };
    std::vector<Tensor> small = {
        x.detach().narrow(0, 0, std::min<int64_t>(c.rows, 5)).contiguous().to(tg::Device(tg::kCPU)).requires_grad_()};
    for (const Tensor& p : params)
      small.push_back(p.detach().to(tg::Device(tg::kCPU)).clone().requires_grad_());
    int64_t numel = 0;
    for (const Tensor& p : params)
      numel += p.numel();
    if (fused && numel <= 400) {  // (finite differences over every parameter)
      ASSERT_TRUE(fn(small).defined());
      const ag::GradcheckResult r1 = ag::gradcheck(fn, small), r2 = ag::gradgradcheck(fn, small);
      EXPECT_TRUE(r1.ok) << r1.message;
      EXPECT_TRUE(r2.ok) << r2.message;
    }
    // A weight changed in place after the forward.
    Tensor y2 = seq->forward(x);
    {
      ag::NoGradGuard ng;
      layers[0]->weight.add_(0.5);
    }
    EXPECT_ERROR_CONTAINS(ag::grad({y2.sum()}, {x}), "modified by an in-place operation");
  }
  // Float32 and a 3-D input (rows as [2, 64]), against the layers one by one.
  {
    const auto f32 = tg::TensorOptions().dtype(tg::kFloat32);
    nn::Sequential f = nn::MLP({2, 64, 64, 2}, "tanh", f32);
    f->to(gpu);
    const Tensor x = tg::randn({2, 64, 2}, f32).to(gpu).requires_grad_();
    std::vector<Tensor> wrt = f->parameters();
    wrt.push_back(x);
    const Tensor y = f->forward(x);
    Tensor want = x;
    for (size_t i = 0; i < 3; ++i) {
      const auto& l = static_cast<const nn::LinearImpl&>(*(*f)[2 * i]);
      want = tg::linear(want, l.weight, l.bias);
      if (i < 2) want = tg::tanh(want);
    }
    ASSERT_EQ(y.sizes(), want.sizes());
    EXPECT_TRUE(tg::allclose(y, want, 1e-5, 1e-5));
    const std::vector<Tensor> g = ag::grad({(y * y).sum()}, wrt), gw = ag::grad({(want * want).sum()}, wrt);
    for (size_t i = 0; i < g.size(); ++i)
      EXPECT_TRUE(tg::allclose(g[i], gw[i], 1e-4, 1e-4)) << "float32 gradient " << i;
  }
}

}  // namespace
