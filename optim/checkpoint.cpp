// save_checkpoint / load_checkpoint: one safetensors file with prefixed
// state dicts (include/tapegrad/optim/checkpoint.h).
#include <tapegrad/optim/checkpoint.h>

#include <exception>
#include <utility>
#include <vector>

#include <tapegrad/nn/serialize.h>
#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/ops.h>

namespace tg::optim {
namespace {

constexpr const char* kFormat = "tapegrad-checkpoint-1";

void add_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& part) {
  for (const auto& [k, v] : part)
    out.emplace_back(prefix + k, v);
}

// The entries of `all` under `prefix` (the prefix removed).
NamedTensors part_of(const NamedTensors& all, const std::string& prefix) {
  NamedTensors out;
  for (const auto& [k, v] : all)
    if (k.compare(0, prefix.size(), prefix) == 0) out.emplace_back(k.substr(prefix.size()), v);
  return out;
}

// Runs `restore`, naming `what` in an error it throws.
template <class F> void restoring(const std::string& path, const char* what, F&& restore) {
  try {
    restore();
  } catch (const std::exception& e) {
    TG_ERROR("load_checkpoint(", path, "): restoring the ", what, " failed: ", e.what());
  }
}

// The schedulers must schedule `optimizer` (a checkpoint's parts belong together).
void check_schedulers(const char* op, const Optimizer& optimizer, const CheckpointSchedulers& s) {
  TG_CHECK(!s.lr || &s.lr->optimizer() == &optimizer, op, ": the ", s.lr ? s.lr->name() : "",
           " passed schedules another optimizer than the one passed; pass the scheduler of this optimizer");
  TG_CHECK(!s.plateau || &s.plateau->optimizer() == &optimizer, op,
           ": the ReduceLROnPlateau passed schedules another optimizer than the one passed; pass the scheduler of "
           "this optimizer");
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& module, const Optimizer& optimizer, int64_t step,
                     CheckpointSchedulers schedulers) {
  TG_CHECK(step >= 0, "save_checkpoint: step must be >= 0, got ", step);
  check_schedulers("save_checkpoint", optimizer, schedulers);
  NamedTensors all;
  add_prefixed(all, "model.", module.state_dict());
  add_prefixed(all, "optimizer.", optimizer.state_dict());
  if (schedulers.lr) add_prefixed(all, "lr_scheduler.", schedulers.lr->state_dict());
  if (schedulers.plateau) add_prefixed(all, "plateau.", schedulers.plateau->state_dict());
  all.emplace_back("rng_state", get_rng_state());
  nn::save_safetensors(path, all, {{"format", kFormat}, {"step", std::to_string(step)}});
}

int64_t load_checkpoint(const std::string& path, nn::Module& module, Optimizer& optimizer,
                        CheckpointSchedulers schedulers) {
  check_schedulers("load_checkpoint", optimizer, schedulers);
  std::string format, step_text;
  bool has_step = false;
  for (const auto& [k, v] : nn::load_safetensors_metadata(path)) {
    if (k == "format") format = v;
    if (k == "step") {
      step_text = v;
      has_step = true;
    }
  }
  TG_CHECK(format == kFormat, "load_checkpoint(", path, "): not a save_checkpoint file (its metadata format is \"",
           format, "\", expected \"", kFormat, "\"); a module alone loads with nn::load");
  TG_CHECK(has_step, "load_checkpoint(", path, "): its metadata has no step");
  // Digits only (as save_checkpoint writes them), at most 18 of them (no overflow).
  const bool digits =
      !step_text.empty() && step_text.size() <= 18 && step_text.find_first_not_of("0123456789") == std::string::npos;
  TG_CHECK(digits, "load_checkpoint(", path, "): its step \"", step_text,
           "\" is not a whole number of at most 18 digits");
  const int64_t step = std::stoll(step_text);
  const NamedTensors all = nn::load_safetensors(path);
  const NamedTensors lr = part_of(all, "lr_scheduler."), plateau = part_of(all, "plateau."),
                     rng = part_of(all, "rng_state");
  TG_CHECK(lr.empty() == (schedulers.lr == nullptr), "load_checkpoint(", path, "): the file ",
           lr.empty() ? "holds no" : "holds an", " epoch scheduler's state but ",
           schedulers.lr ? "one was passed" : "none was passed (CheckpointSchedulers::lr)");
  TG_CHECK(plateau.empty() == (schedulers.plateau == nullptr), "load_checkpoint(", path, "): the file ",
           plateau.empty() ? "holds no" : "holds a", " ReduceLROnPlateau state but ",
           schedulers.plateau ? "one was passed" : "none was passed (CheckpointSchedulers::plateau)");
  TG_CHECK(rng.size() == 1 && rng[0].first.empty(), "load_checkpoint(", path,
           "): the file holds no random generator state (\"rng_state\")");
  const Tensor current = get_rng_state();
  TG_CHECK(rng[0].second.sizes() == current.sizes() && rng[0].second.dtype() == current.dtype(), "load_checkpoint(",
           path, "): its random generator state is ", rng[0].second.dtype(), " ", shape_str(rng[0].second.sizes()),
           ", expected ", current.dtype(), " ", shape_str(current.sizes()), " (get_rng_state's)");
  restoring(path, "module", [&] { module.load_state_dict(part_of(all, "model.")); });
  restoring(path, "optimizer", [&] { optimizer.load_state_dict(part_of(all, "optimizer.")); });
  if (schedulers.lr) restoring(path, "epoch scheduler", [&] { schedulers.lr->load_state_dict(lr); });
  if (schedulers.plateau) restoring(path, "ReduceLROnPlateau", [&] { schedulers.plateau->load_state_dict(plateau); });
  restoring(path, "random generator", [&] { set_rng_state(rng[0].second); });
  return step;
}

}  // namespace tg::optim
