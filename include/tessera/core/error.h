#pragma once
// Typed exceptions. User mistakes are worded "[op] expected ..., got ..."; internal invariants
// go through TESSERA_ASSERT. The library never aborts the process.
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tessera {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
class ValueError : public Error {
 public:
  using Error::Error;
};
class TypeError : public Error {
 public:
  using Error::Error;
};
class IndexError : public Error {
 public:
  using Error::Error;
};
class RuntimeError : public Error {
 public:
  using Error::Error;
};
class NotImplementedError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <class T>
void stream_one(std::ostringstream& os, const std::vector<T>& v) {
  os << '[';
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ']';
}
template <class T>
void stream_one(std::ostringstream& os, const T& v) {
  os << v;
}
// Concatenates its arguments with operator<<; vectors print as [a, b, c].
template <class... Args>
std::string str(const Args&... args) {
  std::ostringstream os;
  (stream_one(os, args), ...);
  return os.str();
}
}  // namespace detail

}  // namespace tessera

// Throws Exc (a tessera exception type) with the concatenated message when cond is false.
#define TESSERA_CHECK(cond, Exc, ...)                             \
  do {                                                            \
    if (!(cond)) throw ::tessera::Exc(::tessera::detail::str(__VA_ARGS__)); \
  } while (0)

#define TESSERA_ASSERT(cond, ...)                                                         \
  do {                                                                                    \
    if (!(cond))                                                                          \
      throw ::tessera::RuntimeError(::tessera::detail::str(                               \
          "[internal] assertion `" #cond "` failed at " __FILE__ ":", __LINE__, ": " __VA_OPT__(, ) \
              __VA_ARGS__));                                                              \
  } while (0)
