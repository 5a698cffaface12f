// One collective call as one asynchronous MXNet engine operation: the inputs are read
// dependencies, the outputs write dependencies (an in-place array is listed once, as a
// write). When the engine runs it, the tensors are handed to the core; the operation
// completes (with the core's error, if any) when the last of them is done.
#ifndef MXHOROVOD_MXNET_ENGINE_OP_H_
#define MXHOROVOD_MXNET_ENGINE_OP_H_

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/common.h"
#include "common/process_set.h"

namespace dmlc {
struct Error;
}

namespace mxhorovod {
namespace mx {

constexpr int kCPUContext[2] = {1, 0};  // mxnet::Context{kCPU, 0}, as MXEnginePush*ND take it

// Same layout as mxnet::engine::CallbackOnComplete (engine.h), whose members are private:
// the engine passes a pointer to one that lives only during our function, so we copy it.
struct EngineCallback {
  void (*fn)(void* engine, void* param, const dmlc::Error* error) = nullptr;
  void* engine = nullptr;
  void* param = nullptr;
};

struct OpTensor {
  void* input = nullptr;    // our own handles (KeepAlive copies), freed with the op
  void* output = nullptr;
  bool in_place = false;
  // A failed operation fills the output with NaN (see FillNaN), except where the output
  // already holds the right result: the root's own array in an in-place broadcast.
  bool fill_on_error = true;
  Request request;          // name, op, dtype, shape, ... (rank filled by the core)
  std::vector<int64_t> recv_splits;
  // The arrays' chunks (see UsedByOurCollective), counted by Push, uncounted by Release.
  const void* input_chunk = nullptr;
  const void* output_chunk = nullptr;
};

// What completes the engine operation when the core is done with its tensors (see
// engine_op.cc). A member of the operation, not an object of its own: every allocation of
// a call is made on the calling thread and freed on the background thread, where glibc's
// per-thread caches do not help (docs/benchmarks.md, thirteenth run).
struct OpCompletion {
  EngineCallback cb;                 // MXNet's, copied when the engine runs the operation
  std::atomic<size_t> remaining{0};  // tensors not yet answered by the core
  std::mutex mu;                     // guards error (tensors may fail on several threads)
  std::string error;                 // the first tensor's error, if any
};

struct EngineOp {
  std::shared_ptr<ProcessSet> set;  // where the tensors are negotiated
  std::vector<OpTensor> tensors;
  // Its tensors' names and its place in their lines (TensorQueue::Register), set at the
  // call: its tensors reach the core after every earlier call of those names completed.
  std::vector<std::string> names;
  uint64_t ticket = 0;
  bool chunks_counted = false;  // Push counted the tensors' chunks (UsedByOurCollective)
  // Some inputs, only read, share a buffer (views of one array, or one array twice, in an
  // out-of-place group; found by Grouped): Push lists each such buffer once.
  bool shared_inputs = false;
  OpCompletion completion;      // set up when the engine runs the operation
  EngineOp* next_dead = nullptr;  // in the list of operations MXNet is done with (NewOp)
  // Under MXNet's NaiveEngine only: the operation's error, for Push to return. That engine
  // runs the operation to completion inside the push and drops the error it completes with.
  std::shared_ptr<std::string> failure;
  // Set when the engine runs the operation. MXNet skips (completes without running) an
  // operation whose input carries an error of the operation that wrote it; such an
  // operation is submitted as failed when it is deleted, so that the ranks where the
  // input did not fail get the error instead of waiting for this rank.
  bool ran = false;
  // Frees our handle copies and unregisters the chunks (idempotent). Done when the
  // operation completes, before MXNet is told: MXNet deletes the operation only after it has
  // woken the waiters, whose next allocations then contended with these frees for malloc's
  // lock (a futex wait in 3.5% of a 1,000-tensor grouped call's profile).
  void Release();
  ~EngineOp() { Release(); }
};

// Whether a collective of ours that reads or writes this array (by chunk identity) is
// pushed and not yet completed. Settling a layout must not wait for the array's readers
// and writers then: that would wait for our own collective, which may need the peers' next
// call (a hang when ranks issue two collectives of one array, or a collective of another's
// output, in different orders).
bool UsedByOurCollective(void* handle);

// A new operation. MXNet is done with an operation on the thread that completes it (the
// background thread), which would free there what the calling thread allocated: glibc
// then takes the slow path on both sides (a fifth of the background thread's instructions
// per tensor, call_cost.py). So those operations are listed, and deleted here, by the next
// call's thread, whose next allocations reuse their memory.
std::unique_ptr<EngineOp> NewOp();

// Pushes the operation. It joins its names' lines here, in call order; when the engine runs
// it, its tensors go to the core once every earlier call of those names has completed, so
// the n-th call of a name meets the n-th call of that name on the other ranks. One name
// twice in the call fails it (the error is raised at the next read of its outputs).
// Under MXNet's NaiveEngine (MXNET_ENGINE_TYPE=NaiveEngine) the operation has completed
// when this returns, and a failure is returned here as kAborted: that engine would drop it.
// `opr_name` shows in MXNet's profiler.
Status Push(std::unique_ptr<EngineOp> op, int priority, const char* opr_name);

// Submits the operation's tensors to the core as failed on this rank with `why` (in its
// names' lines as usual; no data is touched; the requests move out of `op`, whose
// handles stay until Release), so that every rank gets the error
// instead of waiting for this one: for an operation MXNet skipped, or one refused at the
// call because its input carries the error of the operation that wrote it.
void SubmitFailed(EngineOp* op, const std::string& why);

// A call refused at the call on this rank (bad arguments found by this rank alone) would
// leave the other ranks waiting for its names, or, unnamed, shift this rank's numbering so
// that its next call met their refused one. Its names (empty ones and repeats skipped) are
// submitted as failed with "refused at the call: <why>", in call order like any call: the
// same call fails on every rank of `set` ("allreduce 'x' failed on rank 1: refused at the
// call: ..."), and on ranks that refused it too the failures meet and complete unseen.
// Nothing when `set` is null.
void SubmitRefused(std::shared_ptr<ProcessSet> set, OpType type,
                   const std::vector<std::string>& names, const std::string& why);

// A grouped allreduce / reducescatter given an empty list on this rank: `name` (the name
// its tensor 0 would have, '<base>.0') is submitted with no data as a group of 0 tensors,
// in call order like any call. Where the peers passed tensors, their call fails with the
// mismatch of the lists' lengths ("rank 0 passed 0, rank 1 passed 2") instead of waiting
// for this rank's; where every rank passed an empty list the requests meet and nothing
// runs. This rank reads no answer. Nothing when `set` is null.
void SubmitEmptyGroup(std::shared_ptr<ProcessSet> set, OpType type, const std::string& name);

// Pushes an engine operation on `handle` (a write dependency) that completes at once, as
// ours would with no communication: benchmarks use it to measure MXNet's own cost per
// operation (the floor of one collective per tensor). Not part of the API.
Status PushNoop(void* handle);

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_ENGINE_OP_H_
