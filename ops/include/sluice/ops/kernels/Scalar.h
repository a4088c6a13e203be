//===- Scalar.h - Element conversions shared by the kernels -----*- C++ -*-===//
//
// One definition of how a value becomes an element of each type, so cast,
// pad/fill values, the expression interpreter and image fills agree:
//  - float -> integer truncates toward zero (C semantics), then saturates to
//    the target's range; NaN becomes 0. (C leaves out-of-range conversions
//    undefined; saturating is what a pixel pipeline wants: 300.7 -> u8 255.)
//  - integer -> narrower integer saturates as well (no wrap-around).
//  - anything -> bool is `!= 0` (NaN -> true, as in C).
//  - f16 is IEEE binary16, rounded to nearest even; overflow gives +-inf.
//  - bf16 is the top half of an f32, rounded to nearest even (what
//    torch's f32 -> bfloat16 does): subnormals are kept, values beyond the
//    largest bf16 round to +-inf. A NaN stays a NaN of the same sign, made
//    quiet, with the top of its payload (the AVX512-BF16 instruction's
//    result; torch's own NaN bits differ between its CPU paths).
//
//===----------------------------------------------------------------------===//
#ifndef SLUICE_OPS_KERNELS_SCALAR_H
#define SLUICE_OPS_KERNELS_SCALAR_H

#include "sluice/ops/Types.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

namespace sluice {
namespace kernels {

/// IEEE binary16 bits to float (exact).
inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F;
  uint32_t man = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (man << 13); // inf / nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  } else if (man == 0) {
    bits = sign;
  } else {
    // Subnormal half: value = man * 2^-24, exact in float.
    float f = static_cast<float>(man) * 0x1p-24f;
    std::memcpy(&bits, &f, 4);
    bits |= sign;
  }
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

/// Float to IEEE binary16 bits, round to nearest even.
inline uint16_t floatToHalf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) // NaN: keep it quiet
    return sign | 0x7E00 | static_cast<uint16_t>((abs >> 13) & 0x3FF);
  if (abs >= 0x477FF000u) // rounds to >= 65520: overflow to inf
    return sign | 0x7C00;
  if (abs < 0x38800000u) { // below the smallest normal half (2^-14)
    // Scale so the subnormal unit 2^-24 becomes 1 and round to nearest even
    // with the FPU (exact: the product is a float well within range).
    float a;
    std::memcpy(&a, &abs, 4);
    float scaled = a * 0x1p24f;
    float r = std::nearbyint(scaled);
    return sign | static_cast<uint16_t>(r);
  }
  // Normal: rebias exponent, round mantissa to 10 bits (ties to even).
  uint32_t mant = abs + 0xC8000000u; // exponent - 112
  uint32_t round = 0xFFF + ((mant >> 13) & 1);
  return sign | static_cast<uint16_t>((mant + round) >> 13);
}

/// Double to IEEE binary16 bits, correctly rounded (nearest even): the
/// float step rounds to odd, so the second rounding cannot go wrong
/// (float has more than 11 + 2 bits).
inline uint16_t doubleToHalf(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d))
      --b; // rounded away from zero: step back (sign-magnitude bits)
    b |= 1;
    std::memcpy(&f, &b, 4);
  }
  return floatToHalf(f);
}

/// bfloat16 bits to float (exact).
inline float bf16ToFloat(uint16_t h) {
  uint32_t bits = uint32_t(h) << 16;
  float out;
  std::memcpy(&out, &bits, 4);
  return out;
}

/// Float to bfloat16 bits, round to nearest even. Branch-free so that loops
/// of it vectorize.
inline uint16_t floatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
  uint32_t nan = (bits >> 16) | 0x40u;
  return static_cast<uint16_t>((bits & 0x7FFFFFFFu) > 0x7F800000u ? nan
                                                                  : rounded);
}

/// Double to bfloat16 bits, correctly rounded (nearest even): the float
/// step rounds to odd, as doubleToHalf's does (float has more than 8 + 2
/// bits).
inline uint16_t doubleToBf16(double d) {
  float f = static_cast<float>(d);
  if (std::isfinite(f) && static_cast<double>(f) != d) {
    uint32_t b;
    std::memcpy(&b, &f, 4);
    if (std::fabs(static_cast<double>(f)) > std::fabs(d))
      --b;
    b |= 1;
    std::memcpy(&f, &b, 4);
  }
  return floatToBf16(f);
}

/// Converts a double to T with the saturating rules above.
template <typename T> inline T saturateCast(double v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else {
    if (std::isnan(v))
      return 0;
    // Compare in double: bounds of 64-bit types round up to 2^63 / 2^64,
    // so use >= for the upper bound.
    constexpr double lo = static_cast<double>(std::numeric_limits<T>::min());
    constexpr double hi = static_cast<double>(std::numeric_limits<T>::max());
    if (v <= lo)
      return std::numeric_limits<T>::min();
    if (v >= hi)
      return std::numeric_limits<T>::max();
    return static_cast<T>(v);
  }
}

/// Saturating integer-to-integer conversion.
template <typename T> inline T saturateCastInt(int64_t v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v != 0;
  } else if constexpr (std::is_floating_point_v<T>) {
    return static_cast<T>(v);
  } else if constexpr (sizeof(T) == 8) {
    return static_cast<T>(v);
  } else {
    constexpr int64_t lo = std::numeric_limits<T>::min();
    constexpr int64_t hi = std::numeric_limits<T>::max();
    return static_cast<T>(v < lo ? lo : (v > hi ? hi : v));
  }
}

/// Reads element `i` of a numeric buffer of type `elem` as V: a double, or
/// an int64_t (exact for integer types; float values saturate).
template <typename V>
inline V loadElement(ElemType elem, const uint8_t *base, size_t i) {
  static_assert(std::is_same_v<V, double> || std::is_same_v<V, int64_t>);
  auto as = [](auto x) -> V {
    if constexpr (std::is_integral_v<V> &&
                  std::is_floating_point_v<decltype(x)>)
      return saturateCast<V>(x);
    else
      return static_cast<V>(x);
  };
  switch (elem) {
  case ElemType::U8:
    return as(base[i]);
  case ElemType::Bool:
    return as(base[i] != 0);
  case ElemType::I8:
    return as(reinterpret_cast<const int8_t *>(base)[i]);
  case ElemType::U16:
    return as(reinterpret_cast<const uint16_t *>(base)[i]);
  case ElemType::I16:
    return as(reinterpret_cast<const int16_t *>(base)[i]);
  case ElemType::I32:
    return as(reinterpret_cast<const int32_t *>(base)[i]);
  case ElemType::I64:
    return as(reinterpret_cast<const int64_t *>(base)[i]);
  case ElemType::F16:
    return as(halfToFloat(reinterpret_cast<const uint16_t *>(base)[i]));
  case ElemType::BF16:
    return as(bf16ToFloat(reinterpret_cast<const uint16_t *>(base)[i]));
  case ElemType::F32:
    return as(reinterpret_cast<const float *>(base)[i]);
  case ElemType::F64:
    return as(reinterpret_cast<const double *>(base)[i]);
  default:
    return 0;
  }
}

/// Reads element `i` of a numeric buffer of type `elem` as a double.
inline double loadAsDouble(ElemType elem, const uint8_t *base, size_t i) {
  return loadElement<double>(elem, base, i);
}

/// Reads element `i` of an integer or bool buffer exactly.
inline int64_t loadAsInt(ElemType elem, const uint8_t *base, size_t i) {
  return loadElement<int64_t>(elem, base, i);
}

/// saturateCast() of a double, saturateCastInt() of an exact integer.
template <typename T, typename V> inline T saturateFrom(V v) {
  if constexpr (std::is_floating_point_v<V>)
    return saturateCast<T>(v);
  else
    return saturateCastInt<T>(v);
}

/// Writes `v` (a double, or an exact int64_t) as element `i` of a numeric
/// buffer of type `elem`: saturating for integer types, and through double
/// for float types.
template <typename V>
inline void storeElement(ElemType elem, V v, uint8_t *base, size_t i) {
  static_assert(std::is_same_v<V, double> || std::is_same_v<V, int64_t>);
  switch (elem) {
  case ElemType::U8:
    base[i] = saturateFrom<uint8_t>(v);
    break;
  case ElemType::Bool:
    base[i] = v != 0;
    break;
  case ElemType::I8:
    reinterpret_cast<int8_t *>(base)[i] = saturateFrom<int8_t>(v);
    break;
  case ElemType::U16:
    reinterpret_cast<uint16_t *>(base)[i] = saturateFrom<uint16_t>(v);
    break;
  case ElemType::I16:
    reinterpret_cast<int16_t *>(base)[i] = saturateFrom<int16_t>(v);
    break;
  case ElemType::I32:
    reinterpret_cast<int32_t *>(base)[i] = saturateFrom<int32_t>(v);
    break;
  case ElemType::I64:
    reinterpret_cast<int64_t *>(base)[i] = saturateFrom<int64_t>(v);
    break;
  case ElemType::F16:
    reinterpret_cast<uint16_t *>(base)[i] =
        floatToHalf(static_cast<float>(static_cast<double>(v)));
    break;
  case ElemType::BF16:
    reinterpret_cast<uint16_t *>(base)[i] =
        floatToBf16(static_cast<float>(static_cast<double>(v)));
    break;
  case ElemType::F32:
    reinterpret_cast<float *>(base)[i] =
        static_cast<float>(static_cast<double>(v));
    break;
  case ElemType::F64:
    reinterpret_cast<double *>(base)[i] = static_cast<double>(v);
    break;
  default:
    break;
  }
}

/// Writes `v` as element `i` of a numeric buffer of type `elem`.
inline void storeFromDouble(ElemType elem, double v, uint8_t *base, size_t i) {
  storeElement(elem, v, base, i);
}

/// Writes an exact integer as element `i` (saturating for narrow types).
inline void storeFromInt(ElemType elem, int64_t v, uint8_t *base, size_t i) {
  storeElement(elem, v, base, i);
}

} // namespace kernels
} // namespace sluice

#endif // SLUICE_OPS_KERNELS_SCALAR_H
