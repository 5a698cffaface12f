// A flat array in a shared region (ops/shared_regions.h) handed to MXNet without a copy, as
// a DLPack tensor (mx.nd.from_dlpack): DistributedTrainer's gradient buckets, which the
// peers on this host then read through their mappings instead of process_vm_readv.
#ifndef MXHOROVOD_MXNET_SHARED_ARRAY_H_
#define MXHOROVOD_MXNET_SHARED_ARRAY_H_

#include <dlpack/dlpack.h>

#include <cstdint>
#include <string>

namespace mxhorovod {
namespace mx {

// A zero-filled 1-D CPU tensor of `elements` (> 0) elements of DLPack type (code, bits),
// whose deleter frees the region; nullptr with the reason in *why when no region can be
// made (the caller allocates an ordinary array instead).
DLManagedTensor* NewSharedArray(int64_t elements, uint8_t code, uint8_t bits, std::string* why);

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_SHARED_ARRAY_H_
