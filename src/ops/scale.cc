#include "scale.h"

#include <algorithm>
#include <cstring>
#include <limits>

#include "ops/float16.h"

namespace mxhorovod {
namespace {

// An integer result of a scaling: truncated toward zero (as Horovod), and, outside T's
// range, wrapped modulo 2^bits as MXNet's and numpy's integer arithmetic does (uint8 3 with
// prescale -1 is 253), through int64; beyond int64's range it saturates. A plain cast of
// an out-of-range floating value to an integer type is undefined behaviour.
template <typename T>
T ToInteger(long double v) {
  constexpr long double kMin = static_cast<long double>(std::numeric_limits<int64_t>::min());
  constexpr long double kLimit = -kMin;  // 2^63: the first value above int64's range
  int64_t i = v <= kMin ? std::numeric_limits<int64_t>::min()
              : v >= kLimit ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(v);
  return static_cast<T>(static_cast<uint64_t>(i));  // modulo 2^bits (C++20; GCC always)
}

// Each helper reads src and writes dst (the same pointer for in-place scaling).
// Average alone (factor 1, divisor size): exact division in long double, truncated (exact
// for int64 on x86; Horovod's x * (1 / size) in double gives the same below 2^53). With a
// prescale or postscale factor: Horovod's arithmetic, x converted to double times the
// factor (postscale / size for Average) in double, rounded to double, then truncated. An
// exact product would expose the factor's binary rounding: 9 * 0.333...(1/3 in double) is
// 2.9999999999999998 exactly, 3.0 once rounded to double, so the exact product truncated
// 9 with prescale 1/3 to 2 where Horovod gives 3.
template <typename T>
void ScaleInt(T* dst, const T* src, int64_t n, double factor, int divisor) {
  if (factor == 1.0) {
    const long double d = divisor;
    for (int64_t i = 0; i < n; ++i) dst[i] = ToInteger<T>(static_cast<long double>(src[i]) / d);
    return;
  }
  const double f = factor / divisor;
  for (int64_t i = 0; i < n; ++i) {
    const double v = static_cast<double>(src[i]) * f;
    dst[i] = ToInteger<T>(static_cast<long double>(v));
  }
}

template <typename T>
void ScaleReal(T* dst, const T* src, int64_t n, double f) {
  // float32 scaled in float32: what MXNet's own elementwise ops give, and vectorizable.
  const T ff = static_cast<T>(f);
  for (int64_t i = 0; i < n; ++i) dst[i] = src[i] * ff;
}

template <typename T>
T* As(void* p) { return static_cast<T*>(p); }
template <typename T>
const T* As(const void* p) { return static_cast<const T*>(p); }

void Scale(void* dst, const void* src, int64_t count, DataType dtype, double factor, int divisor) {
  const double f = factor / divisor;
  switch (dtype) {
    case DataType::kFloat32: ScaleReal(As<float>(dst), As<float>(src), count, f); break;
    case DataType::kFloat64: ScaleReal(As<double>(dst), As<double>(src), count, f); break;
    case DataType::kFloat16: ScaleFloat16(dst, src, count, static_cast<float>(f)); break;
    case DataType::kUInt8: ScaleInt(As<uint8_t>(dst), As<uint8_t>(src), count, factor, divisor); break;
    case DataType::kInt8: ScaleInt(As<int8_t>(dst), As<int8_t>(src), count, factor, divisor); break;
    case DataType::kInt32: ScaleInt(As<int32_t>(dst), As<int32_t>(src), count, factor, divisor); break;
    case DataType::kInt64: ScaleInt(As<int64_t>(dst), As<int64_t>(src), count, factor, divisor); break;
  }
}

}  // namespace

void ScaleBuffer(void* buf, int64_t count, DataType dtype, double factor, int divisor) {
  if ((factor == 1.0 && divisor == 1) || count == 0) return;
  Scale(buf, buf, count, dtype, factor, divisor);
}

void ScaleCopy(void* dst, const void* src, int64_t count, DataType dtype, double factor,
               int divisor) {
  if (count == 0) return;
  if (factor == 1.0 && divisor == 1) {
    if (dst != src) std::memcpy(dst, src, count * DTypeSize(dtype));
    return;
  }
  Scale(dst, src, count, dtype, factor, divisor);
}

}  // namespace mxhorovod
