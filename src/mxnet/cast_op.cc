#include "mxnet/cast_op.h"

#include <dmlc/logging.h>
#include <mxnet/c_api.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "mxnet/engine_op.h"
#include "mxnet/ndarray.h"
#include "ops/float16.h"

namespace mxhorovod {
namespace mx {
namespace {

constexpr int kFloat32 = 0, kFloat16 = 2;  // mshadow's type flags
constexpr int kNormalProperty = 0;  // FnProperty::kNormal: run on the CPU worker thread

struct CastOp {
  void* src = nullptr;  // our own handles (KeepAlive copies): the arrays outlive the op
  void* dst = nullptr;
  int src_dtype = kFloat32;
  int64_t elements = 0;
  std::string name;  // for errors: the tensor's name, or "float32 -> float16"
};

void RunCast(void* /*rctx*/, void* on_complete, void* param) {
  auto* op = static_cast<CastOp*>(param);
  EngineCallback cb;
  std::memcpy(&cb, on_complete, sizeof(cb));
  void* from = nullptr;
  void* to = nullptr;
  Status s = DataAtRun(op->src, Label{"cast", op->name.c_str(), "input"}, &from);
  if (s.ok()) s = DataAtRun(op->dst, Label{"cast", op->name.c_str(), "output"}, &to);
  if (!s.ok()) {
    dmlc::Error err("mxhorovod: " + s.reason());
    cb.fn(cb.engine, cb.param, &err);
    return;
  }
  if (op->src_dtype == kFloat32) {
    CastFloat32ToFloat16(static_cast<uint16_t*>(to), static_cast<const float*>(from), op->elements);
  } else {
    CastFloat16ToFloat32(static_cast<float*>(to), static_cast<const uint16_t*>(from), op->elements);
  }
  cb.fn(cb.engine, cb.param, nullptr);
}

void DeleteCast(void* param) {
  auto* op = static_cast<CastOp*>(param);
  FreeHandle(op->src);
  FreeHandle(op->dst);
  delete op;
}

}  // namespace

Status PushCast(void* src, void* dst, int priority, const std::string& name) {
  ArrayInfo in, out;
  Status s = Describe(src, Label{"cast", "input"}, &in);
  if (s.ok()) s = Describe(dst, Label{"cast", "output"}, &out);
  if (!s.ok()) return s;
  const bool to_half = in.dtype == kFloat32 && out.dtype == kFloat16;
  const bool to_float = in.dtype == kFloat16 && out.dtype == kFloat32;
  if (!to_half && !to_float) {
    return Status::InvalidArgument(std::string("cast: from ") + MXDTypeName(in.dtype) + " into " +
                                   MXDTypeName(out.dtype) + ": only float32 -> float16 and float16 -> "
                                   "float32 are cast here (use mx.nd.cast for other dtypes)");
  }
  const int64_t n = Elements(src), m = Elements(dst);
  if (n != m) {
    return Status::InvalidArgument("cast: the input has " + std::to_string(n) +
                                   " elements and the output " + std::to_string(m));
  }
  if (ChunkIdentity(src) == ChunkIdentity(dst)) {
    return Status::InvalidArgument("cast: the input and the output are the same array");
  }
  auto* op = new CastOp();
  op->src_dtype = in.dtype;
  op->elements = n;
  op->name = name.empty() ? std::string(MXDTypeName(in.dtype)) + " -> " + MXDTypeName(out.dtype) : name;
  s = KeepAlive(src, &op->src);
  if (s.ok()) s = KeepAlive(dst, &op->dst);
  if (!s.ok()) {
    DeleteCast(op);
    return s;
  }
  int ctx[2] = {kCPUContext[0], kCPUContext[1]};
  int prop = kNormalProperty;
  void* reads[1] = {src};
  void* writes[1] = {dst};
  int rc = MXEnginePushAsyncND(&RunCast, op, &DeleteCast, ctx, reads, 1, writes, 1, &prop, priority,
                               "HorovodCast", false);
  if (rc != 0) {
    DeleteCast(op);
    return Status::UnknownError("MXEnginePushAsyncND failed: " + LastMXNetError());
  }
  return Status::OK();
}

}  // namespace mx
}  // namespace mxhorovod
