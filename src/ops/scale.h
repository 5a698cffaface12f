// Element-wise helpers for the fusion buffer: scale by a factor (prescale/postscale and
// Average's 1/size) and the float16 reductions that MPI has no built-in type for.
#ifndef MXHOROVOD_OPS_SCALE_H_
#define MXHOROVOD_OPS_SCALE_H_

#include <cstdint>

#include "common/common.h"

namespace mxhorovod {

// buf[i] = T(buf[i] * factor / divisor) for count elements (divisor: Average's size).
// Float16 computes in float32, float32 and float64 multiply by factor/divisor; integers
// compute in long double (exact for int64 on x86), dividing exactly, and truncate toward
// zero, as Horovod's integer Average does. No-op when factor / divisor == 1.
void ScaleBuffer(void* buf, int64_t count, DataType dtype, double factor, int divisor = 1);

// dst[i] = src[i] scaled as ScaleBuffer does, in one pass (the fusion buffer's pack and
// unpack copies carry prescale and postscale/Average this way); memcpy when no-op.
void ScaleCopy(void* dst, const void* src, int64_t count, DataType dtype, double factor,
               int divisor = 1);

// inout[i] = op(in[i], inout[i]) on IEEE float16 values (computed in float32, rounded back).
void ReduceFloat16(const void* in, void* inout, int64_t count, ReduceOp op);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_SCALE_H_
