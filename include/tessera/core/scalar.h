#pragma once
// A number passed to an op (alpha, fill value, clamp bound): bool, integer or floating.
#include <cstdint>
#include <ostream>
#include <type_traits>

#include "tessera/core/dtype.h"

namespace tessera {

class Scalar {
 public:
  enum class Kind : uint8_t { Bool, Int, Float };

  Scalar() : kind_(Kind::Int), i_(0) {}
  Scalar(bool v) : kind_(Kind::Bool), i_(v) {}
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  Scalar(T v) : kind_(Kind::Int), i_(static_cast<int64_t>(v)) {}
  template <class T>
    requires std::is_floating_point_v<T>
  Scalar(T v) : kind_(Kind::Float), d_(static_cast<double>(v)) {}
  Scalar(Half v) : Scalar(static_cast<float>(v)) {}
  Scalar(BFloat16 v) : Scalar(static_cast<float>(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Float; }
  bool is_integral() const { return kind_ == Kind::Int; }
  bool is_bool() const { return kind_ == Kind::Bool; }

  double to_double() const { return kind_ == Kind::Float ? d_ : static_cast<double>(i_); }
  int64_t to_int() const { return kind_ == Kind::Float ? static_cast<int64_t>(d_) : i_; }
  // The value converted to the element type T (T may be Half/BFloat16/bool/any arithmetic).
  template <class T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) return kind_ == Kind::Float ? d_ != 0.0 : i_ != 0;
    else if constexpr (std::is_integral_v<T>)
      return kind_ == Kind::Float ? static_cast<T>(d_) : static_cast<T>(i_);
    else return static_cast<T>(to_double());
  }
  // The dtype a tensor made from this scalar alone would have (int64, float32 default, bool).
  DType default_dtype() const {
    return kind_ == Kind::Float ? DType::Float32 : kind_ == Kind::Int ? DType::Int64 : DType::Bool;
  }

 private:
  Kind kind_;
  union {
    int64_t i_;
    double d_;
  };
};

inline std::ostream& operator<<(std::ostream& os, const Scalar& s) {
  if (s.is_floating()) return os << s.to_double();
  if (s.is_bool()) return os << (s.to<bool>() ? "True" : "False");
  return os << s.to_int();
}

}  // namespace tessera
