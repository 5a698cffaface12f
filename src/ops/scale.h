// Element-wise helpers for the fusion buffer: scale by a factor (prescale/postscale and
// Average's 1/size), and the order-independent Min/Max of floating-point values. (The
// float16 kernels, which these call for float16: ops/float16.h.)
#ifndef MXHOROVOD_OPS_SCALE_H_
#define MXHOROVOD_OPS_SCALE_H_

#include <cmath>
#include <cstdint>

#include "common/common.h"

namespace mxhorovod {

// buf[i] = T(buf[i] * factor / divisor) for count elements (divisor: Average's size).
// Float16 computes in float32 (ops/float16.h), float32 and float64 multiply by
// factor/divisor; integers truncate toward zero, as Horovod's: Average alone divides exactly (long double), a
// prescale or postscale factor multiplies in double as Horovod does (x * (factor /
// divisor), rounded to double, then truncated). No-op when factor / divisor == 1.
void ScaleBuffer(void* buf, int64_t count, DataType dtype, double factor, int divisor = 1);

// dst[i] = src[i] scaled as ScaleBuffer does, in one pass (the fusion buffer's pack and
// unpack copies carry prescale and postscale/Average this way); memcpy when no-op.
void ScaleCopy(void* dst, const void* src, int64_t count, DataType dtype, double factor,
               int divisor = 1);

// Min and Max of floating-point values that give the same result whichever operand comes
// first, so every rank of an allreduce gets the same bits whatever order MPI combines the
// ranks' values in on each: a NaN wins (as numpy's minimum/maximum and MXNet's own), and
// -0 is below +0. (a < b ? a : b, MPI's MIN, returns the second operand for a NaN or for
// equal zeros: ranks that combine in different orders then disagree, or the NaN is lost.)
template <typename T>
inline T NanMin(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? a : b;  // -0 below +0
  return a < b ? a : b;
}
template <typename T>
inline T NanMax(T a, T b) {
  if (a != a) return a;
  if (b != b) return b;
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_SCALE_H_
