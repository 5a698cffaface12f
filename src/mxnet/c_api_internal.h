// The C entry points' common path for C++ callers that hold the names as std::strings (the
// Python binding): the same checks, errors and return codes as MXWaitforHorovodAllreduce
// and its grouped forms, without copying each name into a new string.
#ifndef MXHOROVOD_MXNET_C_API_INTERNAL_H_
#define MXHOROVOD_MXNET_C_API_INTERNAL_H_

#include <string>

#include "common/common.h"

namespace mxhorovod {
namespace mx {

// One engine operation over `num` tensors of kind `type` (kAllreduce, kReducescatter or
// kAllgather; reduce_op and the factors are ignored for kAllgather). Returns 0, -1 (refused
// at the call) or -2 (ran and failed, NaiveEngine only); the error text is
// MXHorovodGetLastError().
int Call(OpType type, void** inputs, void** outputs, int num, const std::string* names,
         int reduce_op, double prescale, double postscale, int priority, int process_set_id);

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_C_API_INTERNAL_H_
