// NDArray handles seen through MXNet's C API only (no mxnet:: C++ symbol is used, so the
// module survives wheels that hide MXNet's internals).
#ifndef MXHOROVOD_MXNET_NDARRAY_H_
#define MXHOROVOD_MXNET_NDARRAY_H_

#include <string>
#include <vector>

#include "common/common.h"

namespace mxhorovod {
namespace mx {

// Names an array in error messages ("allreduce 'grad3' input"); the text is built only
// when an error is reported, so the per-tensor path allocates nothing for it.
struct Label {
  const char* op;              // "allreduce"
  const char* name;            // the tensor's name
  const char* role = nullptr;  // "input", "output" or none
  std::string str() const;
};

struct ArrayInfo {
  int dtype = -1;
  std::vector<int64_t> shape;
};

// Checks that `handle` is a CPU array with default storage and a supported dtype. Never
// touches the data: an array whose producer has not run yet is allocated by the engine
// thread that runs it, and reading data() here would race with that allocation (seen: a
// peer's contribution read from a second, uninitialised buffer).
// `what` starts every error message.
Status Describe(void* handle, const Label& what, ArrayInfo* out);
// Converts an array that MKLDNN holds in its own layout back to the default layout and
// waits for that; call only on an array with no pending writes (after wait_to_read()).
Status ResolveLayout(void* handle);
// Whether MXNet's MKLDNN backend may be converting the array to its own layout: a float32
// array of 2 to 5 dimensions that is not a fresh gradient (an inference-mode forward pass
// does that to weights, and does it while it READS them). A collective reading such an
// array first waits for it with WaitDefaultLayout. Never waits.
bool MayConvertLayout(void* handle);
// Waits for the array's pending writers (wait_to_read); their error, if any, is returned.
// Call without the GIL.
Status WaitWriters(void* handle);
// Waits for the array's pending writers and readers, then converts it to the default
// layout (for any array). Call without the GIL.
Status WaitDefaultLayout(void* handle);
// The data pointer when the engine runs the operation, without waiting: fails with a clear
// message if an operation queued before ours converted the array to MKLDNN's layout.
// `ndim` (if known, else -1): an array of 0 or 1 dimensions has no layout of MKLDNN's own
// (its only format is the default one), so MXNDArrayGetData reads it without reordering or
// waiting, and without the DLPack tensor that the check of other arrays allocates (a
// seventh of the per-tensor call's instructions for 1 KiB vectors, call_cost.py).
Status DataAtRun(void* handle, const Label& what, void** data, int ndim = -1);
// The number of elements of the array's current shape (1 for a 0-d array), -1 if MXNet
// cannot tell.
int64_t Elements(void* handle);
// Fills a float16/32/64 array with NaN (other dtypes are left as they are); call only while
// holding the array's write dependency (inside our engine operation). A collective that
// fails as a whole does it to all its outputs: MXNet raises the error once, at the first
// read of any of them, so the others must not read as plausible numbers afterwards.
void FillNaN(void* handle);
// Identity of the memory chunk (and so of the engine variable) behind a handle, without
// touching the data: two views of one buffer (x and x[0:2]) share it. Reads the first
// member of mxnet::NDArray (std::shared_ptr<Chunk> ptr_, ndarray.h of MXNet 1.x; the class
// has no virtual functions), a layout read, not a symbol import.
const void* ChunkIdentity(void* handle);
// A second handle on the same memory, which keeps it alive until FreeHandle.
Status KeepAlive(void* handle, void** copy);
void FreeHandle(void* handle);
std::string LastMXNetError();
// mshadow's type flag as mx.nd names it ("float32", ...; "unknown" out of range).
const char* MXDTypeName(int code);
// mx.autograd.is_recording() without its ctypes call (~1.3 us each, on every plain
// collective call).
bool AutogradIsRecording();

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_NDARRAY_H_
