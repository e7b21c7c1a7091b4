#include <tapegrad/tensor/error.h>

namespace tg::detail {

void throw_error(const std::string& msg) { throw Error(msg); }

void throw_internal(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(
      str_cat("internal error (a tapegrad bug, please report): ", file, ":", line, ": ", cond, " failed. ", msg));
}

}  // namespace tg::detail
