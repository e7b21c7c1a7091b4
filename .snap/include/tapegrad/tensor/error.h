// Errors: user mistakes throw tg::Error with a message that starts with the op
// name; broken library invariants use TG_INTERNAL_ASSERT.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace tg {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void str_append(std::ostringstream&) {}
template <class T, class... Rest> void str_append(std::ostringstream& os, const T& v, const Rest&... rest) {
  os << v;
  str_append(os, rest...);
}
template <class... Args> std::string str_cat(const Args&... args) {
  std::ostringstream os;
  str_append(os, args...);
  return os.str();
}
[[noreturn]] void throw_error(const std::string& msg);
[[noreturn]] void throw_internal(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace tg

// TG_CHECK(cond, "op: what went wrong ", shape, ...) throws tg::Error.
#define TG_CHECK(cond, ...)                                                                          \
  do {                                                                                               \
    if (__builtin_expect(!(cond), 0)) ::tg::detail::throw_error(::tg::detail::str_cat(__VA_ARGS__)); \
  } while (0)

#define TG_ERROR(...) ::tg::detail::throw_error(::tg::detail::str_cat(__VA_ARGS__))

#define TG_INTERNAL_ASSERT(cond, ...)                                                              \
  do {                                                                                             \
    if (__builtin_expect(!(cond), 0))                                                              \
      ::tg::detail::throw_internal(__FILE__, __LINE__, #cond, ::tg::detail::str_cat(__VA_ARGS__)); \
  } while (0)
