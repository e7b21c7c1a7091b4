// Static tensors for CUDA graphs (docs/GRAPHS.md "Static tensors"): a
// registry of tensors whose addresses graphs depend on, the snapshots the
// graphs take at capture end, and the checks. Plain C++: built with and
// without the CUDA backend (without it no graph ever records a snapshot).
#include <tapegrad/cuda/graph.h>

#include <atomic>
#include <mutex>
#include <sstream>
#include <vector>

#include <tapegrad/tensor/error.h>
#include <tapegrad/tensor/tensor.h>

namespace tg::cuda {

namespace {

struct Entry {
  Tensor t;  // kept alive while registered
  std::string name;
  int graphs = 0;  // live snapshots that hold it
};

std::mutex g_mu;
std::vector<Entry> g_entries;
std::atomic<int> g_in_use{0};  // sum of Entry::graphs: the fast path when 0

Entry* find(const TensorImpl* impl) {
  for (Entry& e : g_entries)
    if (e.t.impl() == impl) return &e;
  return nullptr;
}

void* grad_ptr(const Tensor& t) {
  const Tensor& g = t.grad();
  return g.defined() && !g.is_sparse() ? g.data_ptr() : nullptr;
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
    std::lock_guard<std::mutex> lock(g_mu);
    for (const Record& r : records)
      if (Entry* e = find(r.t.impl())) {
        --e->graphs;
        --g_in_use;
      }
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
  std::lock_guard<std::mutex> lock(g_mu);
  if (Entry* e = find(t.impl())) e->name = name;
  else g_entries.push_back({t, name, 0});
}

void unregister_static(const Tensor& t) {
  if (!t.defined()) return;
  std::lock_guard<std::mutex> lock(g_mu);
  for (size_t i = 0; i < g_entries.size(); ++i)
    if (g_entries[i].t.impl() == t.impl()) {
      g_in_use -= g_entries[i].graphs;
      g_entries.erase(g_entries.begin() + long(i));
      return;
    }
}

std::string static_name(const Tensor& t) {
  if (!t.defined()) return "";
  std::lock_guard<std::mutex> lock(g_mu);
  const Entry* e = find(t.impl());
  return e ? e->name : "";
}

bool static_in_use(const Tensor& t) {
  if (g_in_use.load() == 0 || !t.defined()) return false;
  std::lock_guard<std::mutex> lock(g_mu);
  const Entry* e = find(t.impl());
  return e && e->graphs > 0;
}

namespace detail {

void check_static_may_move(const Tensor& t, const char* op, const char* what) {
  if (!static_in_use(t)) return;
  TG_ERROR(op, ": ", what, " of the static tensor '", static_name(t), "' (", t.dtype(), " ",
           t.sizes(), " on ", t.device(), ") would move, and a captured CUDA graph depends on its "
           "address; keep it in place (zero_grad(set_to_none=false), in-place updates), or reset "
           "the graphs that recorded it and capture again");
}

std::vector<Tensor> static_tensors() {
  std::lock_guard<std::mutex> lock(g_mu);
  std::vector<Tensor> out;
  for (const Entry& e : g_entries) out.push_back(e.t);
  return out;
}

std::shared_ptr<void> record_statics() {
  auto s = std::make_shared<Snapshot>();
  std::lock_guard<std::mutex> lock(g_mu);
  for (Entry& e : g_entries) {
    s->records.push_back({e.t, e.name, e.t.data_ptr(), grad_ptr(e.t)});
    ++e.graphs;
    ++g_in_use;
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
