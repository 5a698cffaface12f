// The C entry points: validate, describe, push one engine operation, return (the shape of
// NCCL's API: each call only fills a description and hands it to one enqueue function).
#include "mxhorovod/c_api.h"

#include <memory>
#include <string>

#include "common/operations.h"
#include "mxnet/engine_op.h"
#include "mxnet/ndarray.h"

namespace mxhorovod {
namespace mx {
namespace {

thread_local std::string last_error;

int Fail(const Status& s) {
  last_error = s.reason();
  return -1;
}

std::string What(OpType t, const char* name) {
  return std::string(OpTypeName(t)) + " '" + (name ? name : "") + "'";
}

// Describes input and output, checks what this rank alone can check, and keeps both alive.
Status MakeTensor(OpType type, void* input, void* output, const char* name, OpTensor* t) {
  const std::string what = What(type, name);
  if (!IsInitialized()) {
    std::string why = StopReason();
    return Status::PreconditionError(what + ": mxhorovod is not initialized" +
                                     (why.empty() ? "; call hvd.init() first" : " (" + why + ")"));
  }
  if (name == nullptr || !*name) return Status::InvalidArgument(what + ": empty name");
  ArrayInfo in, out;
  Status s = Describe(input, what + " input", &in);
  if (s.ok()) s = Describe(output, what + " output", &out);
  if (!s.ok()) return s;
  if (in.dtype != out.dtype) return Status::InvalidArgument(what + ": input and output dtypes differ");
  bool same_rows = in.shape.size() == out.shape.size();
  for (size_t i = 1; same_rows && i < in.shape.size(); ++i) same_rows = in.shape[i] == out.shape[i];
  if ((type == OpType::kAllreduce || type == OpType::kBroadcast) ? in.shape != out.shape : !same_rows) {
    return Status::InvalidArgument(what + ": output shape " + ShapeString(out.shape) +
                                   " does not fit input shape " + ShapeString(in.shape));
  }
  t->in_place = (input == output);
  if (!t->in_place && ChunkIdentity(input) == ChunkIdentity(output)) {
    // Views of one buffer as read and write dependencies: the engine would wait on itself.
    return Status::InvalidArgument(what + ": input and output are views of the same buffer");
  }
  t->request.op_type = type;
  t->request.name = name;
  t->request.dtype = static_cast<DataType>(in.dtype);
  t->request.shape = in.shape;
  s = KeepAlive(input, &t->input);
  if (!s.ok()) return s;
  if (t->in_place) {
    t->output = t->input;
  } else {
    s = KeepAlive(output, &t->output);
    if (!s.ok()) {
      FreeHandle(t->input);
      t->input = nullptr;
      return s;
    }
  }
  return Status::OK();
}

Status CheckReduceOp(int op, const char* name) {
  if (op == MXHOROVOD_ADASUM) {
    return Status::InvalidArgument(What(OpType::kAllreduce, name) + ": Adasum is not supported by mxhorovod");
  }
  if (op < 0 || op > MXHOROVOD_PRODUCT) {
    return Status::InvalidArgument(What(OpType::kAllreduce, name) + ": unknown reduce op " + std::to_string(op));
  }
  return Status::OK();
}

int GroupedAllreduce(void** inputs, void** outputs, int num, const char** names, int reduce_op,
                     double prescale, double postscale, int priority) {
  if (num <= 0) return Fail(Status::InvalidArgument("grouped allreduce: no tensors given"));
  auto op = std::make_unique<EngineOp>();
  for (int i = 0; i < num; ++i) {
    Status s = CheckReduceOp(reduce_op, names[i]);
    OpTensor t;
    if (s.ok()) s = MakeTensor(OpType::kAllreduce, inputs[i], outputs[i], names[i], &t);
    if (!s.ok()) return Fail(s);
    t.request.reduce_op = static_cast<ReduceOp>(reduce_op);
    t.request.prescale = prescale;
    t.request.postscale = postscale;
    op->tensors.push_back(std::move(t));
  }
  // The engine hangs on an array listed twice; refuse a handle given twice (the Python
  // layer also refuses the same NDArray object twice).
  for (int i = 0; i < num; ++i) {
    for (int j = 0; j < i; ++j) {
      if (ChunkIdentity(outputs[i]) == ChunkIdentity(outputs[j]) ||
          ChunkIdentity(inputs[i]) == ChunkIdentity(inputs[j]) ||
          ChunkIdentity(inputs[i]) == ChunkIdentity(outputs[j])) {
        return Fail(Status::InvalidArgument("grouped allreduce: '" + std::string(names[i]) + "' and '" +
                                            names[j] + "' are the same array or views of one buffer"));
      }
    }
  }
  Status s = Push(std::move(op), priority, num == 1 ? "HorovodAllreduce" : "HorovodGroupedAllreduce");
  return s.ok() ? 0 : Fail(s);
}

}  // namespace
}  // namespace mx
}  // namespace mxhorovod

using namespace mxhorovod;
using namespace mxhorovod::mx;

extern "C" {

const char* MXHorovodGetLastError(void) { return last_error.c_str(); }

int MXWaitforHorovodAllreduce(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int reduce_op, double prescale_factor, double postscale_factor,
                              int priority) {
  return GroupedAllreduce(&input, &output, 1, &name, reduce_op, prescale_factor, postscale_factor,
                          priority);
}

int MXWaitforHorovodGroupedAllreduce(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs, int num,
                                     const char** names, int reduce_op, double prescale_factor,
                                     double postscale_factor, int priority) {
  return GroupedAllreduce(inputs, outputs, num, names, reduce_op, prescale_factor, postscale_factor,
                          priority);
}

int MXWaitforHorovodBroadcast(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int root_rank, int priority) {
  auto op = std::make_unique<EngineOp>();
  OpTensor t;
  Status s = MakeTensor(OpType::kBroadcast, input, output, name, &t);
  if (!s.ok()) return Fail(s);
  int size = GetTopology().size;
  if (root_rank < 0 || root_rank >= size) {
    FreeHandle(t.input);
    if (!t.in_place) FreeHandle(t.output);
    return Fail(Status::InvalidArgument(What(OpType::kBroadcast, name) + ": root_rank " +
                                        std::to_string(root_rank) + " is not a rank of this job (size " +
                                        std::to_string(size) + ")"));
  }
  t.request.root_rank = root_rank;
  op->tensors.push_back(std::move(t));
  s = Push(std::move(op), priority, "HorovodBroadcast");
  return s.ok() ? 0 : Fail(s);
}

int MXWaitforHorovodAllgather(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int priority) {
  auto op = std::make_unique<EngineOp>();
  OpTensor t;
  Status s = MakeTensor(OpType::kAllgather, input, output, name, &t);
  if (!s.ok()) return Fail(s);
  op->tensors.push_back(std::move(t));
  s = Push(std::move(op), priority, "HorovodAllgather");
  return s.ok() ? 0 : Fail(s);
}

int MXWaitforHorovodAlltoall(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                             const int64_t* splits, const int64_t* recv_splits, int num_splits,
                             int priority) {
  auto op = std::make_unique<EngineOp>();
  OpTensor t;
  Status s = MakeTensor(OpType::kAlltoall, input, output, name, &t);
  if (!s.ok()) return Fail(s);
  op->tensors.push_back(std::move(t));
  OpTensor& ot = op->tensors.back();
  int size = GetTopology().size;
  if (num_splits != size) {
    return Fail(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": " + std::to_string(num_splits) +
                                        " splits given for " + std::to_string(size) + " ranks"));
  }
  int64_t rows = 0;
  for (int i = 0; i < num_splits; ++i) {
    if (splits[i] < 0 || recv_splits[i] < 0) {
      return Fail(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": negative split"));
    }
    rows += splits[i];
  }
  if (rows > ot.request.shape[0]) {
    return Fail(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": splits add up to " +
                                        std::to_string(rows) + " rows but the tensor has " +
                                        std::to_string(ot.request.shape[0])));
  }
  ot.request.splits.assign(splits, splits + num_splits);
  ot.recv_splits.assign(recv_splits, recv_splits + num_splits);
  s = Push(std::move(op), priority, "HorovodAlltoall");
  return s.ok() ? 0 : Fail(s);
}

}  // extern "C"
