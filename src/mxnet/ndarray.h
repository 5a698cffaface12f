// NDArray handles seen through MXNet's C API only (no mxnet:: C++ symbol is used, so the
// module survives wheels that hide MXNet's internals).
#ifndef MXHOROVOD_MXNET_NDARRAY_H_
#define MXHOROVOD_MXNET_NDARRAY_H_

#include <string>
#include <vector>

#include "common/common.h"

namespace mxhorovod {
namespace mx {

struct ArrayInfo {
  int dtype = -1;
  std::vector<int64_t> shape;
  void* data = nullptr;  // at the call; re-read when the engine runs the operation
};

// Checks that `handle` is a CPU array with default storage and a supported dtype, and
// resolves an MKLDNN layout it holds now (MXNDArrayGetData waits only in that case).
// `what` (e.g. "allreduce 'grad3'") starts every error message.
Status Describe(void* handle, const std::string& what, ArrayInfo* out);
// The data pointer when the engine runs the operation, without waiting: fails with a clear
// message if an operation queued before ours converted the array to MKLDNN's layout.
Status DataAtRun(void* handle, const std::string& what, void** data);
// A second handle on the same memory, which keeps it alive until FreeHandle.
Status KeepAlive(void* handle, void** copy);
void FreeHandle(void* handle);
std::string LastMXNetError();

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_NDARRAY_H_
