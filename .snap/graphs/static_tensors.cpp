// Static tensors for CUDA graphs (docs/GRAPHS.md "Static tensors"): a
// registry of tensors whose addresses graphs depend on, the snapshots the
// graphs take at capture end, and the replay check. The mark each tensor
// carries (tensor/static_mark.h) is what the layers below read. Plain C++:
// built with and without the CUDA backend (without it no graph ever records
// a snapshot).
#include <tapegrad/cuda/graph.h>

#include <algorithm>
#include <mutex>
#include <sstream>
#include <vector>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/tensor.h>
#include "tensor/static_mark.h"

namespace tg::cuda {

namespace {

// The registered tensors, in registration order (each holds its mark).
std::mutex g_mu;
std::vector<Tensor> g_entries;

std::vector<Tensor>::iterator find(const TensorImpl* impl) {
  return std::find_if(g_entries.begin(), g_entries.end(), [&](const Tensor& t) { return t.impl() == impl; });
}

void* grad_ptr(const Tensor& t) {
  if (!t.is_leaf() && !t.retains_grad()) return nullptr;  // no .grad() (reading it throws)
  const Tensor& g = t.grad();
  return g.defined() && !g.is_sparse() ? g.data_ptr() : nullptr;
}

std::string name_of(const Tensor& t) {
  StaticMark* m = t.impl()->static_mark();
  if (!m) return "";
  return m->name();
}

struct Record {
  Tensor t;
  std::string name;
  void* data;
  void* grad;
};

struct Snapshot {
  std::vector<Record> records;
  ~Snapshot() {
    for (const Record& r : records)
      r.t.impl()->static_mark()->graphs.fetch_sub(1, std::memory_order_acq_rel);
  }
};

std::string address(const void* p) {
  std::ostringstream o;
  if (p) o << p;
  else o << "none";
  return o.str();
}

}  // namespace

void register_static(const Tensor& t, const std::string& name) {
  TG_CHECK(t.defined(), "register_static: '", name, "' is an undefined tensor");
  StaticMark& m = t.impl()->ensure_static_mark();
  m.set_name(name);
  std::lock_guard<std::mutex> lock(g_mu);
  if (find(t.impl()) == g_entries.end()) g_entries.push_back(t);
  m.registered.store(true, std::memory_order_release);
}

void unregister_static(const Tensor& t) {
  if (!t.defined()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  auto it = find(t.impl());
  if (it == g_entries.end()) return;
  t.impl()->static_mark()->registered.store(false, std::memory_order_release);
  g_entries.erase(it);
}

std::string static_name(const Tensor& t) {
  if (!t.defined()) return "";
  const StaticMark* m = t.impl()->static_mark();
  return m && m->registered.load(std::memory_order_acquire) ? name_of(t) : "";
}

namespace detail {

std::vector<Tensor> static_tensors() {
  std::lock_guard<std::mutex> lock(g_mu);
  return g_entries;
}

std::shared_ptr<void> record_statics() {
  auto s = std::make_shared<Snapshot>();
  std::lock_guard<std::mutex> lock(g_mu);
  for (const Tensor& t : g_entries) {
    s->records.push_back({t, name_of(t), t.data_ptr(), grad_ptr(t)});
    t.impl()->static_mark()->graphs.fetch_add(1, std::memory_order_acq_rel);
  }
  return s;
}

void check_statics(const std::shared_ptr<void>& statics, const char* op) {
  if (!statics) return;
  for (const Record& r : static_cast<const Snapshot*>(statics.get())->records) {
    void* data = r.t.data_ptr();
    void* grad = grad_ptr(r.t);
    const bool value_moved = data != r.data, grad_moved = grad != r.grad;
    if (!value_moved && !grad_moved) continue;
    const char* what = value_moved ? "its data" : "its .grad";
    TG_ERROR(op, ": the static tensor '", r.name, "' moved since the capture (", what, " was at ",
             address(value_moved ? r.data : r.grad), ", now at ", address(value_moved ? data : grad),
             "); the graph reads and writes it at the captured address. Keep static tensors in "
             "place (zero_grad(set_to_none=false), in-place updates, no reassignment), or reset() "
             "the graph and capture again");
  }
}

}  // namespace detail
}  // namespace tg::cuda
