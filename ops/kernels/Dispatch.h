//===- Dispatch.h - Calls a template with the C++ type of an ElemType -----===//
//
// Private to ops/kernels. f16 and bf16 are carried as their bits (Half,
// BFloat) and bool as a byte (Bool8) so each storage type has a distinct tag.
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_DISPATCH_H
#define SLUICE_OPS_KERNELS_DISPATCH_H

#include "sluice/ops/Types.h"
#include "sluice/ops/kernels/Scalar.h"

#include <cstdint>

namespace sluice {
namespace kernels {
namespace detail {

struct Half {
  uint16_t bits;
};
struct BFloat {
  uint16_t bits;
};
struct Bool8 {
  uint8_t v;
};

template <typename T> struct Tag {
  using type = T;
};

/// Calls f(Tag<T>{}) for the storage type of a numeric element type. Returns
/// false for Bytes/String.
template <typename F> bool visitNumeric(ElemType t, F &&f) {
  switch (t) {
  case ElemType::U8:
    f(Tag<uint8_t>{});
    return true;
  case ElemType::I8:
    f(Tag<int8_t>{});
    return true;
  case ElemType::U16:
    f(Tag<uint16_t>{});
    return true;
  case ElemType::I16:
    f(Tag<int16_t>{});
    return true;
  case ElemType::I32:
    f(Tag<int32_t>{});
    return true;
  case ElemType::I64:
    f(Tag<int64_t>{});
    return true;
  case ElemType::F16:
    f(Tag<Half>{});
    return true;
  case ElemType::BF16:
    f(Tag<BFloat>{});
    return true;
  case ElemType::F32:
    f(Tag<float>{});
    return true;
  case ElemType::F64:
    f(Tag<double>{});
    return true;
  case ElemType::Bool:
    f(Tag<Bool8>{});
    return true;
  default:
    return false;
  }
}

/// Calls f(Tag<T>{}) for unsigned storage of the same byte size (for kernels
/// that only move bits: transpose, pad, stack).
template <typename F> bool visitBySize(size_t bytes, F &&f) {
  switch (bytes) {
  case 1:
    f(Tag<uint8_t>{});
    return true;
  case 2:
    f(Tag<uint16_t>{});
    return true;
  case 4:
    f(Tag<uint32_t>{});
    return true;
  case 8:
    f(Tag<uint64_t>{});
    return true;
  default:
    return false;
  }
}

template <typename T> constexpr bool isFloatStorage() {
  return std::is_floating_point_v<T> || std::is_same_v<T, Half> ||
         std::is_same_v<T, BFloat>;
}

/// The value of one element widened to float/double or int64.
template <typename T> inline auto widen(T v) {
  if constexpr (std::is_same_v<T, Half>)
    return halfToFloat(v.bits);
  else if constexpr (std::is_same_v<T, BFloat>)
    return bf16ToFloat(v.bits);
  else if constexpr (std::is_same_v<T, Bool8>)
    return static_cast<int64_t>(v.v != 0);
  else if constexpr (std::is_floating_point_v<T>)
    return v;
  else
    return static_cast<int64_t>(v);
}

/// Converts one element From -> To with the rules of Scalar.h.
template <typename From, typename To> inline To convertOne(From v) {
  auto w = widen(v);
  using W = decltype(w);
  if constexpr (std::is_same_v<To, Bool8>) {
    return Bool8{static_cast<uint8_t>(w != 0)};
  } else if constexpr (std::is_same_v<To, Half>) {
    return Half{floatToHalf(static_cast<float>(w))};
  } else if constexpr (std::is_same_v<To, BFloat>) {
    return BFloat{floatToBf16(static_cast<float>(w))};
  } else if constexpr (std::is_floating_point_v<To>) {
    return static_cast<To>(w);
  } else if constexpr (std::is_floating_point_v<W>) {
    return saturateCast<To>(static_cast<double>(w));
  } else {
    return saturateCastInt<To>(w);
  }
}

} // namespace detail
} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_DISPATCH_H
