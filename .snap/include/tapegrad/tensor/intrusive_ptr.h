// A small intrusive reference-counted pointer. Objects derive from
// IntrusiveTarget; the count lives in the object, so a handle is one pointer
// and use_count() is exact (accumulation rules need "uniquely owned").
#pragma once

#include <atomic>
#include <cstddef>
#include <utility>

namespace tg {

class IntrusiveTarget;

namespace detail {
/// Deletes an object whose count reached zero. Destruction never recurses in
/// proportion to a chain's length (a graph of 10^7 nodes, tensors holding
/// nodes holding tensors): an object released while another is being
/// destroyed on this thread is queued and deleted after it, in a loop.
void destroy_intrusive(IntrusiveTarget* p) noexcept;
}  // namespace detail

/// Base of objects owned through IntrusivePtr (the count lives in the object).
class IntrusiveTarget {
 public:
  IntrusiveTarget() = default;
  IntrusiveTarget(const IntrusiveTarget&) = delete;
  IntrusiveTarget& operator=(const IntrusiveTarget&) = delete;
  virtual ~IntrusiveTarget() = default;

  /// How many IntrusivePtrs own it.
  size_t use_count() const { return refcount_.load(std::memory_order_acquire); }

 private:
  template <class T> friend class IntrusivePtr;
  mutable std::atomic<size_t> refcount_{0};
};

template <class T>
/// A shared pointer whose count lives in the object (T derives from IntrusiveTarget); freeing never recurses
/// (detail::destroy_intrusive).
class IntrusivePtr {
 public:
  IntrusivePtr() = default;
  /// Owns `p` (adds to its count).
  explicit IntrusivePtr(T* p) : p_(p) { retain(); }
  /// Shares, moves, or converts from a pointer to a derived type.
  IntrusivePtr(const IntrusivePtr& o) : p_(o.p_) { retain(); }
  IntrusivePtr(IntrusivePtr&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }  ///< takes over `o`
  template <class U>
  IntrusivePtr(IntrusivePtr<U> o) : p_(o.release()) {}  ///< converts from a pointer to a derived type
  ~IntrusivePtr() { reset(); }

  /// Shares or moves `o`.
  IntrusivePtr& operator=(IntrusivePtr o) noexcept {
    std::swap(p_, o.p_);
    return *this;
  }

  template <class... Args>
  /// A new T from `args`.
  static IntrusivePtr make(Args&&... args) {
    return IntrusivePtr(new T(std::forward<Args>(args)...));
  }

  /// The object (null when empty), its count, and whether there is one.
  T* get() const { return p_; }
  T* operator->() const { return p_; }                           ///< the object
  T& operator*() const { return *p_; }                           ///< the object
  explicit operator bool() const { return p_ != nullptr; }       ///< whether there is an object
  size_t use_count() const { return p_ ? p_->use_count() : 0; }  ///< its count (0 when empty)

  /// Lets go (frees the object when this was the last owner).
  void reset() {
    if (p_ && p_->refcount_.fetch_sub(1, std::memory_order_acq_rel) == 1) detail::destroy_intrusive(p_);
    p_ = nullptr;
  }
  /// Gives up ownership without decrementing (used by converting moves).
  T* release() {
    T* p = p_;
    p_ = nullptr;
    return p;
  }

  /// Whether both point at the same object.
  friend bool operator==(const IntrusivePtr& a, const IntrusivePtr& b) { return a.p_ == b.p_; }
  /// Whether they point at different objects.
  friend bool operator!=(const IntrusivePtr& a, const IntrusivePtr& b) { return a.p_ != b.p_; }

 private:
  template <class U> friend class IntrusivePtr;
  void retain() {
    if (p_) p_->refcount_.fetch_add(1, std::memory_order_relaxed);
  }
  T* p_ = nullptr;
};

}  // namespace tg
