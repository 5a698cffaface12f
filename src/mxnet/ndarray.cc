#include "mxnet/ndarray.h"

#include <dlpack/dlpack.h>
#include <mxnet/c_api.h>

#include <algorithm>
#include <cstdint>
#include <limits>

namespace mxhorovod {
namespace mx {
const char* MXDTypeName(int code) {
  static const char* names[] = {"float32", "float64", "float16", "uint8", "int32", "int8", "int64",
                                "bool", "int16", "uint16", "uint32", "uint64", "bfloat16"};
  return code >= 0 && code <= 12 ? names[code] : "unknown";
}

std::string Label::str() const {
  std::string s = std::string(op) + " '" + (name ? name : "") + "'";
  if (role) s += std::string(" ") + role;
  return s;
}

std::string LastMXNetError() {
  std::string s = MXGetLastError();
  auto cut = s.find("\nStack trace");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

Status Describe(void* handle, const Label& label, ArrayInfo* out) {
  if (handle == nullptr) return Status::InvalidArgument(label.str() + ": the NDArray handle is null");
  int stype = 0;
  if (MXNDArrayGetStorageType(handle, &stype) != 0) return Status::InvalidArgument(label.str() + ": " + LastMXNetError());
  if (stype != 0) {
    return Status::InvalidArgument(
        label.str() + ": " + (stype == 1 ? "row_sparse" : stype == 2 ? "csr" : "undefined-storage") +
        " NDArrays are not supported; convert with .tostype('default') first");
  }
  int dev_type = 0, dev_id = 0;
  MXNDArrayGetContext(handle, &dev_type, &dev_id);
  if (dev_type == 2) {
    return Status::InvalidArgument(label.str() + ": GPU arrays are not supported by this build (CPU, MPI only)");
  }
  if (MXNDArrayGetDType(handle, &out->dtype) != 0) return Status::InvalidArgument(label.str() + ": " + LastMXNetError());
  if (!IsSupportedDType(out->dtype)) {
    return Status::InvalidArgument(label.str() + ": dtype " + MXDTypeName(out->dtype) +
                                   " is not supported (use float16, float32, float64, uint8, "
                                   "int8, int32 or int64)");
  }
  int ndim = 0;
  const int* dims = nullptr;
  if (MXNDArrayGetShapeEx(handle, &ndim, &dims) != 0) return Status::InvalidArgument(label.str() + ": " + LastMXNetError());
  int np_shape = 0;
  if (ndim == 0) MXIsNumpyShape(&np_shape);  // only a 0-d shape needs it (one C call less)
  if (ndim < 0) {
    return Status::InvalidArgument(label.str() + ": the NDArray has no shape (uninitialized)");
  }
  if (ndim == 0 && !np_shape) {
    return Status::InvalidArgument(
        label.str() + ": the NDArray has shape () (a 0-d array, as mx.nd.array(0.5) makes from "
        "a Python number), which MXNet's legacy shape mode takes for an unknown shape: pass a "
        "1-d array (mx.nd.array([value]), shape (1,)), or turn on NumPy shape semantics "
        "(mx.npx.set_np()), where () is one element");
  }
  out->shape.assign(dims, dims + ndim);  // () under npx.set_np(): a 0-d array, 1 element
  return Status::OK();
}

Status ResolveLayout(void* handle) {
  void* data = nullptr;
  if (MXNDArrayGetData(handle, &data) != 0) return Status::InvalidArgument(LastMXNetError());
  return Status::OK();
}

bool MayConvertLayout(void* handle) {
  int dtype = -1, ndim = 0, fresh_grad = 0;
  const int* dims = nullptr;
  if (MXNDArrayGetDType(handle, &dtype) != 0 || dtype != 0) return false;
  if (MXNDArrayGetShapeEx(handle, &ndim, &dims) != 0 || ndim < 2 || ndim > 5) return false;
  return MXNDArrayGetGradState(handle, &fresh_grad) == 0 && !fresh_grad;
}

Status WaitWriters(void* handle) {
  if (MXNDArrayWaitToRead(handle) != 0) return Status::InvalidArgument(LastMXNetError());
  return Status::OK();
}

Status WaitDefaultLayout(void* handle) {
  if (MXNDArrayWaitToWrite(handle) != 0) return Status::InvalidArgument(LastMXNetError());
  return ResolveLayout(handle);
}

Status DataAtRun(void* handle, const Label& label, void** data, int ndim) {
  if (ndim == 0 || ndim == 1) {
    if (MXNDArrayGetData(handle, data) != 0) {
      return Status::PreconditionError(label.str() + ": " + LastMXNetError());
    }
    return Status::OK();
  }
  // MXNDArrayToDLPack never waits: for an array in MKLDNN layout it fails its check instead
  // (MXNDArrayGetData would reorder and wait for our own operation: a deadlock).
  DLManagedTensorHandle dl = nullptr;
  if (MXNDArrayToDLPack(handle, &dl) != 0) {
    return Status::PreconditionError(
        label.str() + ": the array was converted to MKLDNN's internal layout by an operation queued "
        "before this one (an inference-mode forward pass, or an MKLDNN operator such as a "
        "convolution given it as an input), which this operation cannot read (wait_to_read() does "
        "not change the layout): do not give the array to such an operator between its last "
        "write and this operation (for a gradient: between backward and the trainer's step). "
        "MXNet said: " + LastMXNetError());
  }
  auto* t = static_cast<DLManagedTensor*>(dl);
  *data = static_cast<char*>(t->dl_tensor.data) + t->dl_tensor.byte_offset;
  MXNDArrayCallDLPackDeleter(dl);
  return Status::OK();
}

int64_t Elements(void* handle) {
  int ndim = 0;
  const int* dims = nullptr;
  if (MXNDArrayGetShapeEx(handle, &ndim, &dims) != 0 || ndim < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < ndim; ++i) n *= dims[i];
  return n;
}

void FillNaN(void* handle) {
  int dtype = -1;
  void* data = nullptr;
  if (MXNDArrayGetDType(handle, &dtype) != 0 || dtype < 0 || dtype > 2) return;
  const int64_t n = Elements(handle);
  if (n < 0 || !DataAtRun(handle, Label{"", ""}, &data).ok() || data == nullptr) return;
  if (dtype == 0) {
    std::fill_n(static_cast<float*>(data), n, std::numeric_limits<float>::quiet_NaN());
  } else if (dtype == 1) {
    std::fill_n(static_cast<double*>(data), n, std::numeric_limits<double>::quiet_NaN());
  } else {
    std::fill_n(static_cast<uint16_t*>(data), n, uint16_t{0x7E00});  // IEEE half quiet NaN
  }
}

const void* ChunkIdentity(void* handle) {
  return handle ? *static_cast<void* const*>(handle) : nullptr;
}

Status KeepAlive(void* handle, void** copy) {
  if (MXShallowCopyNDArray(handle, copy) != 0) return Status::UnknownError(LastMXNetError());
  return Status::OK();
}

bool AutogradIsRecording() {
  bool on = false;
  return MXAutogradIsRecording(&on) == 0 && on;
}

void FreeHandle(void* handle) {
  if (handle) MXNDArrayFree(handle);
}

}  // namespace mx
}  // namespace mxhorovod
