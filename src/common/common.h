// Framework-free types shared by the core: data types, reduce ops, the request a rank
// submits, the response every rank executes, and one queued tensor with its callback.
// No MXNet and no MPI header here: the adapter and the data plane translate.
#ifndef MXHOROVOD_COMMON_COMMON_H_
#define MXHOROVOD_COMMON_COMMON_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "status.h"

namespace mxhorovod {

// Values follow mshadow's type flags, so the MXNet adapter needs no table.
enum class DataType : int32_t {
  kFloat32 = 0, kFloat64 = 1, kFloat16 = 2, kUInt8 = 3,
  kInt32 = 4, kInt8 = 5, kInt64 = 6,
};
bool IsSupportedDType(int32_t code);
int DTypeSize(DataType t);
const char* DTypeName(DataType t);
bool IsFloat(DataType t);

// Same numbering as horovod.common.basics (Average 0, Sum 1, Adasum 2, Min 3, Max 4, Product 5).
enum class ReduceOp : int32_t { kAverage = 0, kSum = 1, kAdasum = 2, kMin = 3, kMax = 4, kProduct = 5 };
const char* ReduceOpName(ReduceOp op);

// kProcessSetAdd/Remove are control operations of the global set: negotiated like a
// collective so every rank changes its process sets at the same point of the same cycle.
// kJoin: a rank out of data (hvd.join()); answered once every rank has joined, while the
// others' Sum, Average and Adasum allreduces go on with the joined ranks adding zeros.
enum class OpType : int32_t {
  kAllreduce = 0, kAllgather = 1, kBroadcast = 2, kAlltoall = 3, kReducescatter = 4,
  kProcessSetAdd = 5, kProcessSetRemove = 6, kJoin = 7,
};
const char* OpTypeName(OpType t);
inline bool IsControl(OpType t) { return t == OpType::kProcessSetAdd || t == OpType::kProcessSetRemove; }

std::string ShapeString(const std::vector<int64_t>& shape);
// "1 rank", "3 ranks": a count of ranks in an error message.
std::string RankCount(int64_t n);
int64_t NumElements(const std::vector<int64_t>& shape);

// What one rank asks for; sent to the coordinator when the name is not in the cache.
struct Request {
  int32_t rank = 0;
  OpType op_type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::string name;
  std::vector<int64_t> shape;
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  int32_t process_set_id = 0;   // routes the entry; negotiated within that set only
  // Allreduce / reducescatter: the number of tensors of the call that submitted it (1 for
  // a single call); the ranks must agree (else a rank with fewer tensors would go on and
  // the others wait forever for the tensors it lacks). 0: a grouped call given an empty
  // list, submitted as its tensor 0's name with no data (see SubmitEmptyGroup), so that
  // the peers' tensors fail instead of waiting for it. -1: not checked.
  int32_t group_size = -1;
  // Allreduce / reducescatter: made by a grouped call (its tensors named '<name>.<i>'), not
  // a single one. The ranks must agree: a grouped call 'x' of one tensor and a single call
  // 'x.0' share a name and a length, and made in different orders on different ranks they
  // were paired with each other (each rank got the other call's sum, silently).
  bool grouped = false;
  // An allgather's or alltoall's size exchange (mxhorovod.collectives.submit._size_exchange_name): it
  // carries its call's name, before the call's data collective of that name. The response
  // cache keeps the two apart (ResponseCache); the ranks must agree (MessageTable::Build),
  // else their caches would place entries differently.
  bool size_exchange = false;
  // Min, Max and Product allreduces only (mxhorovod's own checks): a joined rank adds the
  // op's identity (the lowest value for Max, the highest for Min, 1 for Product) instead
  // of failing the call. Not part of the public API: Horovod's fail.
  bool join_identity = false;
  // Set when this rank could not run its part (found when the engine ran the operation):
  // the request still goes to the coordinator, so every rank gets the error, none hangs.
  std::string local_error;
};

// What every rank executes, in the same order. One response may name several tensors
// (a group, or fusion planned later). first_dims: allgather's dim 0 per rank, per tensor.
struct Response {
  enum Type : int32_t { kOk = 0, kError = 1 };
  Type type = kOk;
  OpType op_type = OpType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  int32_t root_rank = 0;
  double prescale = 1.0;
  double postscale = 1.0;
  std::vector<std::string> names;
  std::string error;
  std::vector<int64_t> first_dims;   // allgather: size * names.size() entries
  std::vector<int64_t> recv_splits;  // alltoall: filled per rank at execution
  // Ranks that had joined (hvd.join()) when the coordinator answered, ascending. They add
  // zeros: `elements` (one name per response then) sizes their zero-filled tensor. A join
  // response: first_dims holds the rank that joined last.
  std::vector<int64_t> joined;
  int64_t elements = 0;
};

// A tensor as the core sees it: raw memory, element count and shape, no framework.
// An array's memory: the input's shape is the request's; an output may differ (allgather,
// alltoall, reducescatter), and the executor checks its size only.
struct TensorView {
  void* data = nullptr;
  int64_t elements = 0;
  int64_t num_elements() const { return elements; }
};

using StatusCallback = std::function<void(const Status&)>;

// One submitted collective: the request, its memory, and the callback that completes it.
struct TensorTableEntry {
  Request request;
  TensorView input;
  TensorView output;   // same data pointer as input for in-place calls
  std::vector<int64_t> recv_splits;  // alltoall
  StatusCallback callback;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_COMMON_H_
