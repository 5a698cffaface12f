// The C entry points: validate, describe, push one engine operation, return (the shape of
// NCCL's API: each call only fills a description and hands it to one enqueue function).
#include "mxhorovod/c_api.h"

#include <algorithm>
#include <memory>
#include <sstream>
#include <utility>
#include <vector>
#include <string>

#include "common/executor.h"
#include "common/operations.h"
#include "ops/adasum.h"
#include "mxnet/c_api_internal.h"
#include "mxnet/engine_op.h"
#include "mxnet/ndarray.h"

namespace mxhorovod {
namespace mx {
namespace {

thread_local std::string last_error;

// -1: refused at the call; -2: the collective ran and failed (MXNet's NaiveEngine only).
int Fail(const Status& s) {
  last_error = s.reason();
  return s.code() == Status::kAborted ? -2 : -1;
}

// A refusal after the call's set is known: the same call fails on the other ranks of the set
// too, instead of waiting for this one (SubmitRefused); returns Fail(why).
int Refuse(const std::shared_ptr<ProcessSet>& set, OpType type, const std::vector<std::string>& names,
           const Status& why) {
  SubmitRefused(set, type, names, why.reason());
  return Fail(why);
}

std::string What(OpType t, const char* name) {
  return std::string(OpTypeName(t)) + " '" + (name ? name : "") + "'";
}

// Describes input and output, checks what this rank alone can check, and keeps both alive.
// `name` by value: callers holding a std::string hand it over without an allocation.
Status MakeTensor(OpType type, const ProcessSet& set, void* input, void* output, std::string name,
                  OpTensor* t) {
  const char* cname = name.c_str();
  if (name.empty()) return Status::InvalidArgument(What(type, cname) + ": empty name");
  ArrayInfo in, described_out;
  Status s = Describe(input, Label{OpTypeName(type), cname, "input"}, &in);
  if (!s.ok()) return s;
  if (output != input) {
    s = Describe(output, Label{OpTypeName(type), cname, "output"}, &described_out);
    if (!s.ok()) return s;
  }
  const ArrayInfo& out = output == input ? in : described_out;
  if (in.dtype != out.dtype) return Status::InvalidArgument(What(type, cname) + ": input and output dtypes differ");
  bool same_rows = in.shape.size() == out.shape.size();
  for (size_t i = 1; same_rows && i < in.shape.size(); ++i) same_rows = in.shape[i] == out.shape[i];
  bool fits = same_rows;
  if (type == OpType::kAllreduce || type == OpType::kBroadcast) {
    fits = in.shape == out.shape;
  } else if (type == OpType::kReducescatter) {
    if (in.shape.empty()) {
      return Status::InvalidArgument(What(type, cname) + ": a 0-d array has no dimension 0 to scatter");
    }
    fits = same_rows && out.shape[0] == ReducescatterRows(in.shape[0], set.size, set.rank);
  }
  if (!fits) {
    return Status::InvalidArgument(What(type, cname) + ": output shape " + ShapeString(out.shape) +
                                   " does not fit input shape " + ShapeString(in.shape));
  }
  t->in_place = (input == output);
  if (t->in_place && type == OpType::kReducescatter) {
    return Status::InvalidArgument(What(type, cname) + ": reducescatter cannot run in place");
  }
  if (!t->in_place && ChunkIdentity(input) == ChunkIdentity(output)) {
    // Views of one buffer as read and write dependencies: the engine would wait on itself.
    return Status::InvalidArgument(What(type, cname) + ": input and output are views of the same buffer");
  }
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
  t->request.op_type = type;
  t->request.name = std::move(name);
  t->request.dtype = static_cast<DataType>(in.dtype);
  t->request.shape = std::move(in.shape);  // `out` may be `in`: not read after this
  return Status::OK();
}

std::string Number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

Status CheckReduceOp(OpType type, int op, const char* name, double prescale, double postscale) {
  if (op == MXHOROVOD_ADASUM && type == OpType::kAllreduce && (prescale != 1.0 || postscale != 1.0)) {
    // Adasum is not linear: a factor before or after it is not the same as one inside it,
    // and no user of Horovod's Adasum passes one.
    return Status::InvalidArgument(What(type, name) + ": Adasum takes no prescale_factor or "
                                   "postscale_factor (got " + Number(prescale) + " and " +
                                   Number(postscale) + "); scale the tensor or the result");
  }
  if (op < 0 || op > MXHOROVOD_PRODUCT) {
    return Status::InvalidArgument(What(type, name) + ": unknown reduce op " + std::to_string(op));
  }
  if (type == OpType::kReducescatter && op != MXHOROVOD_SUM && op != MXHOROVOD_AVERAGE) {
    return Status::InvalidArgument(What(type, name) + ": only Sum and Average are supported, not " +
                                   ReduceOpName(static_cast<ReduceOp>(op)));
  }
  return Status::OK();
}

// A call's tensor names: C strings (the C API) or std::strings (the Python binding, whose
// strings are shared, not copied: the library's std::string counts references).
struct Names {
  const char* const* c = nullptr;
  const std::string* s = nullptr;
  bool distinct = false;  // made distinct by the caller: not checked again
  const char* c_str(int i) const { return s ? s[i].c_str() : c[i]; }
  std::string str(int i) const { return s ? s[i] : std::string(c[i] ? c[i] : ""); }
};

// One engine operation over num tensors of one kind (a single call is a group of one).
// With `fail_with`, the operation is not pushed: its tensors are submitted as failed on this
// rank with that text (see SubmitFailed) and the call returns -1 with it.
thread_local bool t_join_identity = false;

int Grouped(OpType type, void** inputs, void** outputs, int num, const Names& names, int reduce_op,
            double prescale, double postscale, int priority, int process_set_id,
            const std::string* fail_with = nullptr, bool size_exchange = false,
            bool grouped = false) {
  auto kind = [type, num] {  // for errors only
    return num == 1 ? std::string(OpTypeName(type)) : std::string("grouped ") + OpTypeName(type);
  };
  if (num <= 0) return Fail(Status::InvalidArgument(kind() + ": no tensors given"));
  if (!inputs || !outputs || (!names.c && !names.s)) {  // C callers only
    return Fail(Status::InvalidArgument(kind() + ": the " +
                                        (!inputs ? "inputs" : !outputs ? "outputs" : "names") +
                                        " array is null"));
  }
  auto op = NewOp();
  Status s = MemberSet(process_set_id, OpTypeName(type), names.c_str(0), &op->set);
  if (!s.ok()) return Fail(s);  // not a member: the set's calls do not count this rank
  auto refuse = [&](const Status& why) {  // from here the peers' call fails too (Refuse)
    std::vector<std::string> all;
    all.reserve(num);
    for (int i = 0; i < num; ++i) all.push_back(names.str(i));
    return Refuse(op->set, type, all, why);
  };
  op->tensors.reserve(num);
  const bool reduces = type == OpType::kAllreduce || type == OpType::kReducescatter;
  for (int i = 0; i < num; ++i) {
    if (reduces) {
      s = CheckReduceOp(type, reduce_op, names.c_str(i), prescale, postscale);
      if (!s.ok()) return refuse(s);
    }
    OpTensor t;
    s = MakeTensor(type, *op->set, inputs[i], outputs[i], names.str(i), &t);
    if (!s.ok()) return refuse(s);
    if (reduces) {
      t.request.reduce_op = static_cast<ReduceOp>(reduce_op);
      t.request.prescale = prescale;
      t.request.postscale = postscale;
      t.request.group_size = num;
      t.request.grouped = grouped;
      t.request.join_identity = t_join_identity;
    }
    t.request.size_exchange = size_exchange;
    const DataType dtype = t.request.dtype;
    op->tensors.push_back(std::move(t));  // from here `op` frees its handles
    if (reduces && reduce_op == MXHOROVOD_ADASUM && !AdasumDType(dtype)) {
      return refuse(Status::InvalidArgument(What(type, names.c_str(i)) + ": Adasum takes float16, "
                                            "float32 or float64 tensors, not " + DTypeName(dtype)));
    }
  }
  // The engine hangs on an array written twice, or read and written, by one operation:
  // refuse a buffer that one tensor writes (an output, or an in-place tensor) and another
  // tensor reads or writes (the Python layer also refuses the same NDArray object twice in
  // an in-place call). Inputs that are only read may share a buffer (x[0:2] and x[4:6], or
  // x twice, out of place, as Horovod reads them): Push lists each buffer once. Sorted, not
  // pairwise: a group may hold thousands of tensors.
  if (num > 1) {
    struct Use {
      const void* chunk;
      int tensor;
      bool written;
      bool operator<(const Use& o) const {
        return chunk != o.chunk ? chunk < o.chunk : tensor < o.tensor;
      }
    };
    std::vector<Use> chunks;
    chunks.reserve(2 * num);
    for (int i = 0; i < num; ++i) {
      const bool in_place = op->tensors[i].in_place;
      chunks.push_back({ChunkIdentity(inputs[i]), i, in_place});
      if (!in_place) chunks.push_back({ChunkIdentity(outputs[i]), i, true});
    }
    std::sort(chunks.begin(), chunks.end());
    for (size_t a = 0; a < chunks.size();) {
      size_t b = a + 1;
      bool written = chunks[a].written;
      while (b < chunks.size() && chunks[b].chunk == chunks[a].chunk) written |= chunks[b++].written;
      // [a, b): the uses of one buffer, by tensor index. Input and output of one tensor
      // were refused in MakeTensor.
      const int first = chunks[a].tensor, last = chunks[b - 1].tensor;
      if (written && first != last) {
        return refuse(Status::InvalidArgument(
            kind() + ": '" + names.str(last) + "' and '" + names.str(first) +
            "' are the same array or views of one buffer, which this call writes (in place: "
            "pass separate arrays, or one array)"));
      }
      if (first != last) op->shared_inputs = true;
      a = b;
    }
    // The core matches tensors by name: one name twice (C callers, or a list of names
    // from Python) could not be told apart.
    std::vector<const std::string*> sorted;
    if (!names.distinct) {
      sorted.reserve(num);
      for (const auto& t : op->tensors) sorted.push_back(&t.request.name);
      std::sort(sorted.begin(), sorted.end(),
                [](const std::string* a, const std::string* b) { return *a < *b; });
    }
    for (size_t k = 1; k < sorted.size(); ++k) {
      if (*sorted[k] == *sorted[k - 1]) {
        return refuse(Status::InvalidArgument(kind() + ": the name '" + *sorted[k] + "' appears twice"));
      }
    }
  }
  if (fail_with) {
    SubmitFailed(op.get(), *fail_with);
    return Fail(Status::InvalidArgument(*fail_with));
  }
  static const char* kOprNames[] = {"HorovodAllreduce", "HorovodAllgather", "HorovodBroadcast",
                                    "HorovodAlltoall", "HorovodReducescatter"};
  s = Push(std::move(op), priority, kOprNames[static_cast<int>(type)]);
  return s.ok() ? 0 : Fail(s);
}

}  // namespace

void SetJoinIdentity(bool on) { t_join_identity = on; }

int Call(OpType type, void** inputs, void** outputs, int num, const std::string* names,
         int reduce_op, double prescale, double postscale, int priority, int process_set_id,
         const std::string* fail_with, bool names_distinct, bool size_exchange, bool grouped) {
  Names n;
  n.s = names;
  n.distinct = names_distinct;
  return Grouped(type, inputs, outputs, num, n, reduce_op, prescale, postscale, priority,
                 process_set_id, fail_with, size_exchange, grouped);
}

int Broadcast(void* input, void* output, const std::string& name, int root_rank, int priority,
              int process_set_id, const std::string* fail_with) {
  auto op = NewOp();
  Status s = MemberSet(process_set_id, OpTypeName(OpType::kBroadcast), name.c_str(), &op->set);
  if (!s.ok()) return Fail(s);
  // root_rank is a rank of the job, as in Horovod (a set's broadcast from its member 3
  // passes 3); the core works with its position within the set.
  const auto& ranks = op->set->ranks;
  const auto found = std::find(ranks.begin(), ranks.end(), root_rank);
  auto refuse = [&](const Status& why) { return Refuse(op->set, OpType::kBroadcast, {name}, why); };
  if (found == ranks.end()) {
    return refuse(Status::InvalidArgument(What(OpType::kBroadcast, name.c_str()) + ": root_rank " +
                                          std::to_string(root_rank) + " is not a rank of " +
                                          op->set->Describe()));
  }
  const int root = (int)(found - ranks.begin());
  OpTensor t;
  s = MakeTensor(OpType::kBroadcast, *op->set, input, output, name, &t);
  if (!s.ok()) return refuse(s);
  t.request.root_rank = root;
  t.fill_on_error = !(t.in_place && root == op->set->rank);
  op->tensors.push_back(std::move(t));
  if (fail_with) {
    SubmitFailed(op.get(), *fail_with);
    return Fail(Status::InvalidArgument(*fail_with));
  }
  s = Push(std::move(op), priority, "HorovodBroadcast");
  return s.ok() ? 0 : Fail(s);
}

int Alltoall(void* input, void* output, const char* name, const int64_t* splits,
             const int64_t* recv_splits, int num_splits, int priority, int process_set_id,
             bool size_exchange, const std::string* fail_with) {
  auto op = NewOp();
  Status s = MemberSet(process_set_id, OpTypeName(OpType::kAlltoall), name, &op->set);
  if (!s.ok()) return Fail(s);
  auto refuse = [&](const Status& why) {
    return Refuse(op->set, OpType::kAlltoall, {name ? name : ""}, why);
  };
  const int size = op->set->size;
  if (num_splits != size) {
    return refuse(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": " + std::to_string(num_splits) +
                                        " splits given for " + RankCount(size)));
  }
  if (!splits || !recv_splits) {
    return refuse(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": the " +
                                        (!splits ? "splits" : "recv_splits") + " array is null"));
  }
  OpTensor t;
  s = MakeTensor(OpType::kAlltoall, *op->set, input, output, name ? name : "", &t);
  if (!s.ok()) return refuse(s);
  op->tensors.push_back(std::move(t));
  OpTensor& ot = op->tensors.back();
  int64_t rows = 0;
  for (int i = 0; i < num_splits; ++i) {
    if (splits[i] < 0 || recv_splits[i] < 0) {
      return refuse(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": negative split"));
    }
    rows += splits[i];
  }
  if (ot.request.shape.empty() || rows > ot.request.shape[0]) {
    return refuse(Status::InvalidArgument(What(OpType::kAlltoall, name) + ": splits add up to " +
                                        std::to_string(rows) + " rows but the tensor has " +
                                        std::to_string(ot.request.shape.empty() ? 0 : ot.request.shape[0])));
  }
  ot.request.splits.assign(splits, splits + num_splits);
  ot.recv_splits.assign(recv_splits, recv_splits + num_splits);
  ot.request.size_exchange = size_exchange;
  if (fail_with) {
    SubmitFailed(op.get(), *fail_with);
    return Fail(Status::InvalidArgument(*fail_with));
  }
  s = Push(std::move(op), priority, "HorovodAlltoall");
  return s.ok() ? 0 : Fail(s);
}

}  // namespace mx
}  // namespace mxhorovod

using namespace mxhorovod;
using namespace mxhorovod::mx;

namespace {
Names CNames(const char* const* names) {
  Names n;
  n.c = names;
  return n;
}
}  // namespace

extern "C" {

const char* MXHorovodGetLastError(void) { return last_error.c_str(); }

int MXWaitforHorovodAllreduce(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int reduce_op, double prescale_factor, double postscale_factor,
                              int priority, int process_set_id) {
  return Grouped(OpType::kAllreduce, &input, &output, 1, CNames(&name), reduce_op, prescale_factor,
                 postscale_factor, priority, process_set_id);
}

int MXWaitforHorovodGroupedAllreduce(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs, int num,
                                     const char** names, int reduce_op, double prescale_factor,
                                     double postscale_factor, int priority, int process_set_id) {
  return Grouped(OpType::kAllreduce, inputs, outputs, num, CNames(names), reduce_op, prescale_factor,
                 postscale_factor, priority, process_set_id, nullptr, false, true);
}

int MXWaitforHorovodReducescatter(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                                  int reduce_op, double prescale_factor, double postscale_factor,
                                  int priority, int process_set_id) {
  return Grouped(OpType::kReducescatter, &input, &output, 1, CNames(&name), reduce_op, prescale_factor,
                 postscale_factor, priority, process_set_id);
}

int MXWaitforHorovodGroupedReducescatter(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs,
                                         int num, const char** names, int reduce_op,
                                         double prescale_factor, double postscale_factor,
                                         int priority, int process_set_id) {
  return Grouped(OpType::kReducescatter, inputs, outputs, num, CNames(names), reduce_op, prescale_factor,
                 postscale_factor, priority, process_set_id, nullptr, false, true);
}

int MXWaitforHorovodAllgather(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int priority, int process_set_id) {
  return Grouped(OpType::kAllgather, &input, &output, 1, CNames(&name), 0, 1.0, 1.0, priority,
                 process_set_id);
}

int MXWaitforHorovodGroupedAllgather(MXHNDArrayHandle* inputs, MXHNDArrayHandle* outputs, int num,
                                     const char** names, int priority, int process_set_id) {
  return Grouped(OpType::kAllgather, inputs, outputs, num, CNames(names), 0, 1.0, 1.0, priority,
                 process_set_id);
}

int MXWaitforHorovodBroadcast(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                              int root_rank, int priority, int process_set_id) {
  return Broadcast(input, output, name ? name : "", root_rank, priority, process_set_id);
}

int MXWaitforHorovodAlltoall(MXHNDArrayHandle input, MXHNDArrayHandle output, const char* name,
                             const int64_t* splits, const int64_t* recv_splits, int num_splits,
                             int priority, int process_set_id) {
  return mxhorovod::mx::Alltoall(input, output, name, splits, recv_splits, num_splits, priority,
                                 process_set_id, false);
}

}  // extern "C"
