// A dtype cast between float32 and float16 as an MXNet engine operation: what
// mx.nd.cast(src, dtype, out=dst) does, bit for bit, with the F16C kernels of
// ops/float16.h instead of MXNet's one element at a time (ResNet-50's 25.5M gradients on
// one core: 62 + 32 ms there and back in MXNet). Compression.fp16 in DistributedTrainer
// casts each gradient into its float16 wire buffer and the result back with it.
#ifndef MXHOROVOD_MXNET_CAST_OP_H_
#define MXHOROVOD_MXNET_CAST_OP_H_

#include <string>

#include "common/status.h"

namespace mxhorovod {
namespace mx {

// Pushes the cast of `src` into `dst` (NDArray handles): a read of src and a write of dst
// in MXNet's engine, run on its CPU worker like MXNet's own operators; returns at once.
// Both must be dense CPU arrays with the same number of elements, one float32 and the
// other float16, and not the same array. InvalidArgument naming both otherwise (nothing
// pushed). A failure when it runs (src or dst left in MKLDNN's layout) is raised by MXNet
// at the next read of dst, naming `name` (the tensor's, e.g. its collective's; may be
// empty) and which of the two arrays it was.
Status PushCast(void* src, void* dst, int priority, const std::string& name = std::string());

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_CAST_OP_H_
