// Element-wise helpers for the fusion buffer: scale by a factor (prescale/postscale and
// Average's 1/size) and the float16 reductions that MPI has no built-in type for.
#ifndef MXHOROVOD_OPS_SCALE_H_
#define MXHOROVOD_OPS_SCALE_H_

#include <cstdint>

#include "common/common.h"

namespace mxhorovod {

// buf[i] = T(buf[i] * factor) for count elements. Float16 computes in float32; integers
// compute in double and truncate toward zero, as Horovod's ScaleBuffer does (so an integer
// Average truncates). No-op when factor == 1.
void ScaleBuffer(void* buf, int64_t count, DataType dtype, double factor);

// inout[i] = op(in[i], inout[i]) on IEEE float16 values (computed in float32, rounded back).
void ReduceFloat16(const void* in, void* inout, int64_t count, ReduceOp op);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_SCALE_H_
