#include "mxnet/engine_op.h"

#include <dmlc/logging.h>
#include <mxnet/c_api.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "common/operations.h"
#include "common/spare_nodes.h"
#include "mxnet/ndarray.h"

namespace mxhorovod {
namespace mx {
namespace {

// FnProperty::kAsync (engine.h): an operation that only starts work and returns. MXNet runs
// one whose dependencies are ready when it is pushed at once in the pushing thread, else in
// the thread that completes its last dependency's writer (through the CPU worker queue).
// With kCPUPrioritized every operation woke a priority worker thread: a futex wake and two
// context switches per collective, which on 2 cores shared by 2 ranks cost more than the
// rest of the call (1,000 x 1 KiB one call each: 25 -> 17 ms per step; grouped 8.4 -> 7).
// The price: `priority` orders nothing once our operations skip the priority queue; they
// run in the order their inputs become ready, which for gradients is backward's order.
constexpr int kAsyncProperty = 4;

// Completes the engine operation once every tensor of the call is done; then takes it out
// of its names' lines, admitting the next calls of those names. The tensors' callbacks hold
// a plain pointer to the operation: a callable that small is stored inside std::function
// (a shared_ptr capture was a heap allocation and two atomic counts per tensor).
void End(EngineOp* op);

void Done(EngineOp* op, const Status& s) {
  OpCompletion& c = op->completion;
  if (!s.ok()) {
    std::lock_guard<std::mutex> lk(c.mu);
    if (c.error.empty()) c.error = s.reason();
  }
  if (--c.remaining == 0) End(op);  // the last callback: no other thread touches it any more
}

void End(EngineOp* op) {
  // Out of the lines first: MXNet may delete the operation when it is told (inside the
  // callback, with the completion it holds). The next calls of its names run after (from
  // this thread, no lock held).
  auto admitted = op->set->queue.Finish(op->names, op->ticket);
  const EngineCallback cb = op->completion.cb;
  if (op->completion.error.empty()) {
    op->Release();
    cb.fn(cb.engine, cb.param, nullptr);
  } else {
    // MXNet stores a copy and rethrows it at the next wait on the outputs, but only once
    // for all of them (raising clears it): the outputs become NaN, so that the ones read
    // after the first do not pass for results. The core no longer touches the buffers;
    // our handles are freed before MXNet is told (EngineOp::Release).
    for (const auto& t : op->tensors) {
      if (t.fill_on_error) FillNaN(t.output);
    }
    op->Release();
    if (op->failure) *op->failure = op->completion.error;
    dmlc::Error err("mxhorovod: " + op->completion.error);
    cb.fn(cb.engine, cb.param, &err);  // `op` may be gone after this
  }
  TensorQueue::RunAdmitted(std::move(admitted));
}

std::vector<std::string> NamesOf(const EngineOp& op) {
  std::vector<std::string> names;
  names.reserve(op.tensors.size());
  for (const auto& t : op.tensors) names.push_back(t.request.name);
  return names;
}

// The core's entry for a tensor of the operation, without data: its request moves to the
// core (the operation hands its tensors over once; the handles stay for Release).
TensorTableEntry TakeEntry(OpTensor& t, int32_t set_id) {
  TensorTableEntry e;
  e.request = std::move(t.request);
  e.request.process_set_id = set_id;
  e.recv_splits = std::move(t.recv_splits);
  e.input.elements = e.output.elements = NumElements(e.request.shape);
  return e;
}

// Hands the operation's tensors to the core (it is first in its names' lines).
void Submit(EngineOp* op) {
  // The entries' vector is the thread's, kept between calls (one allocation less per call
  // made on one thread and freed on another); taken out while in use, so that a Submit
  // nested in this one (through a failure's callbacks) allocates its own.
  thread_local std::vector<TensorTableEntry> kept;
  std::vector<TensorTableEntry> entries = std::move(kept);
  entries.clear();
  entries.reserve(op->tensors.size());
  for (OpTensor& t : op->tensors) {
    entries.push_back(TakeEntry(t, op->set->id));
    TensorTableEntry& e = entries.back();
    const Label label{OpTypeName(e.request.op_type), e.request.name.c_str()};
    const int ndim = (int)e.request.shape.size();  // the input's; the output's is alike
    Status s = DataAtRun(t.input, label, &e.input.data, ndim);
    if (s.ok() && !t.in_place) s = DataAtRun(t.output, label, &e.output.data);
    if (!s.ok()) {
      // Whether this happens can differ between ranks (it depends on when the engine ran
      // the op that changed the layout), so the failure is negotiated like a request:
      // every rank gets the error and none waits for this one.
      e.request.local_error = s.reason();
      e.input.data = e.output.data = nullptr;
    }
    if (t.in_place) {
      e.output.data = e.input.data;
    } else {
      e.output.elements = Elements(t.output);  // checked by Describe at the call
    }
    e.callback = [op](const Status& st) { Done(op, st); };
  }
  // Once queued, the entries may complete and `op` be deleted before Enqueue returns; it
  // touches the set only before queuing them (or when it refuses them).
  Enqueue(*op->set, std::move(entries));
  entries.clear();  // moved from: the entries' husks, the capacity kept for the next call
  kept = std::move(entries);
}

// Runs on an MXNet engine thread when the dependencies are ready; returns at once. The
// tensors go to the core now if the operation is first in its names' lines, else when
// the call of the same name made before it completes (TensorQueue::Admit): engine order
// differs between ranks, call order does not.
void RunOp(void* /*rctx*/, void* on_complete, void* param) {
  auto* op = static_cast<EngineOp*>(param);
  op->ran = true;
  std::memcpy(&op->completion.cb, on_complete, sizeof(EngineCallback));
  op->completion.remaining = op->names.size();
  if (op->set->queue.Admit(op->names, op->ticket, [op] { Submit(op); })) Submit(op);
}

// Takes an operation submitted without data (SubmitWithoutData) out of its names' lines
// once the core has answered all its tensors.
struct FailedNames {
  std::shared_ptr<ProcessSet> set;
  std::vector<std::string> names;
  uint64_t ticket = 0;
  std::atomic<size_t> remaining{0};
  void Done() {
    if (--remaining == 0) {
      auto admitted = set->queue.Finish(names, ticket);
      delete this;
      TensorQueue::RunAdmitted(std::move(admitted));
    }
  }
};

// Takes a ticket and joins the operation's names' lines (at the call, in call order).
void Register(EngineOp* op) {
  op->names = NamesOf(*op);
  op->ticket = op->set->queue.Register(op->names);
}

// Submits the operation's requests with no data, in its names' lines, and takes it out of
// them once the core has answered every one (the answer is not read: no data was given).
// With `why`, they are submitted as failed on this rank (local_error).
void SubmitWithoutData(EngineOp* op, const std::string* why) {
  if (!op->set || op->tensors.empty()) return;
  if (op->ticket == 0) Register(op);  // refused at the call, or an empty call: never pushed
  auto* names = new FailedNames();
  names->set = op->set;
  names->names = op->names;
  names->ticket = op->ticket;
  names->remaining = op->tensors.size();
  auto entries = std::make_shared<std::vector<TensorTableEntry>>();
  entries->reserve(op->tensors.size());
  for (OpTensor& t : op->tensors) {
    entries->push_back(TakeEntry(t, op->set->id));  // data: null
    if (why) entries->back().request.local_error = *why;
    entries->back().callback = [names](const Status&) { names->Done(); };
  }
  auto submit = [entries] { Enqueue(std::move(*entries)); };
  if (op->set->queue.Admit(op->names, op->ticket, submit)) submit();
}

}  // namespace

void SubmitFailed(EngineOp* op, const std::string& why) { SubmitWithoutData(op, &why); }

void SubmitRefused(std::shared_ptr<ProcessSet> set, OpType type,
                   const std::vector<std::string>& names, const std::string& why) {
  if (!set) return;
  EngineOp op;  // no arrays: the core reads no data of a failed request
  op.set = std::move(set);
  std::unordered_set<std::string> seen;
  for (const auto& name : names) {
    if (name.empty() || !seen.insert(name).second) continue;
    OpTensor t;
    t.request.op_type = type;
    t.request.name = name;
    op.tensors.push_back(std::move(t));
  }
  SubmitFailed(&op, "refused at the call: " + why);
}

void SubmitEmptyGroup(std::shared_ptr<ProcessSet> set, OpType type, const std::string& name) {
  if (!set) return;
  EngineOp op;
  op.set = std::move(set);
  OpTensor t;
  t.request.op_type = type;
  t.request.name = name;
  t.request.group_size = 0;  // the coordinator compares it with the peers' lengths
  t.request.grouped = true;
  op.tensors.push_back(std::move(t));
  SubmitWithoutData(&op, nullptr);
}

namespace {

// The operations MXNet is done with, not yet deleted (see NewOp): a stack that any thread
// pushes onto and the calling thread empties at once. At most kMaxDead: past that (no call
// for a while) the thread that is done with one deletes it.
std::atomic<EngineOp*> dead_ops{nullptr};
std::atomic<int> dead_count{0};
constexpr int kMaxDead = 4096;

void Bury(EngineOp* op) {
  if (dead_count.fetch_add(1, std::memory_order_relaxed) >= kMaxDead) {
    dead_count.fetch_sub(1, std::memory_order_relaxed);
    delete op;
    return;
  }
  op->next_dead = dead_ops.load(std::memory_order_relaxed);
  while (!dead_ops.compare_exchange_weak(op->next_dead, op, std::memory_order_release,
                                         std::memory_order_relaxed)) {
  }
}

// An operation MXNet skipped (see EngineOp::ran) fails on every rank; nothing is written:
// the outputs already carry the input's error on this rank.
void DeleteOp(void* param) {
  auto* op = static_cast<EngineOp*>(param);
  if (!op->ran) {
    SubmitFailed(op, "the operation that writes its input failed on this rank, so MXNet "
                     "skipped this collective there (read that input on that rank to see the error)");
  }
  Bury(op);
}

// Chunk -> number of our operations in flight reading or writing it. Never destroyed:
// engine threads may delete operations after main() returns. A chunk's node is counted
// by the calling thread and erased by the background thread; erased nodes are kept for
// reuse, so that neither allocates nor frees one per call (see TensorQueue::spare_).
class ChunkUses {
 public:
  void Count(const std::vector<OpTensor>& tensors) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& t : tensors) {
      Add(t.input_chunk);
      if (!t.in_place) Add(t.output_chunk);
    }
  }
  void Uncount(const std::vector<OpTensor>& tensors) {
    std::lock_guard<std::mutex> lk(mu_);
    for (const auto& t : tensors) {
      Remove(t.input_chunk);
      if (!t.in_place) Remove(t.output_chunk);
    }
  }
  bool Has(const void* chunk) {
    std::lock_guard<std::mutex> lk(mu_);
    return uses_.count(chunk) > 0;
  }

 private:
  using Map = std::unordered_map<const void*, int>;
  void Add(const void* c) {
    auto it = uses_.find(c);
    if (it != uses_.end()) {
      ++it->second;
    } else {
      spare_.Emplace(uses_, c, 1);
    }
  }
  void Remove(const void* c) {
    auto it = uses_.find(c);
    if (it != uses_.end() && --it->second == 0) spare_.Erase(uses_, it);
  }
  std::mutex mu_;
  Map uses_;
  SpareNodes<Map> spare_{4096};
};

ChunkUses& Uses() {
  static auto* uses = new ChunkUses();
  return *uses;
}

}  // namespace

bool UsedByOurCollective(void* handle) { return Uses().Has(ChunkIdentity(handle)); }

std::unique_ptr<EngineOp> NewOp() {
  // Taking the whole stack at once: no other thread pops, so no ABA.
  EngineOp* op = dead_ops.load(std::memory_order_relaxed) == nullptr
                     ? nullptr
                     : dead_ops.exchange(nullptr, std::memory_order_acquire);
  int n = 0;
  while (op != nullptr) {
    EngineOp* next = op->next_dead;
    delete op;
    op = next;
    ++n;
  }
  if (n) dead_count.fetch_sub(n, std::memory_order_relaxed);
  return std::make_unique<EngineOp>();
}

void EngineOp::Release() {
  if (chunks_counted) {
    Uses().Uncount(tensors);
    chunks_counted = false;
  }
  for (auto& t : tensors) {
    FreeHandle(t.input);
    if (!t.in_place) FreeHandle(t.output);
    t.input = t.output = nullptr;
  }
}

Status Push(std::unique_ptr<EngineOp> op, int priority, const char* opr_name) {
  // The engine's dependency lists: on the stack for a call of a few tensors (the common
  // one-tensor call makes no allocation here).
  constexpr size_t kOnStack = 8;
  void* reads_on_stack[kOnStack];
  void* writes_on_stack[kOnStack];
  std::vector<void*> reads_on_heap, writes_on_heap;
  const size_t n = op->tensors.size();
  void** reads = reads_on_stack;
  void** writes = writes_on_stack;
  if (n > kOnStack) {
    reads_on_heap.resize(n);
    writes_on_heap.resize(n);
    reads = reads_on_heap.data();
    writes = writes_on_heap.data();
  }
  int num_reads = 0, num_writes = 0;
  for (auto& t : op->tensors) {
    // Never list one array as both read and write: the engine would wait on itself.
    writes[num_writes++] = t.output;
    t.input_chunk = ChunkIdentity(t.input);
    if (!t.in_place) t.output_chunk = ChunkIdentity(t.output);
  }
  // Each buffer read once: out-of-place inputs may be views of one buffer (or one array
  // twice), which Grouped accepts when nothing writes it (and then marks the operation).
  if (!op->shared_inputs) {
    for (auto& t : op->tensors) {
      if (!t.in_place) reads[num_reads++] = t.input;
    }
  } else {
    std::unordered_set<const void*> seen;
    for (auto& t : op->tensors) {
      if (!t.in_place && seen.insert(t.input_chunk).second) reads[num_reads++] = t.input;
    }
  }
  int ctx[2] = {kCPUContext[0], kCPUContext[1]};
  int prop = kAsyncProperty;
  Uses().Count(op->tensors);
  op->chunks_counted = true;
  static const bool naive_engine = [] {
    const char* e = std::getenv("MXNET_ENGINE_TYPE");
    return e != nullptr && std::string(e) == "NaiveEngine";
  }();
  std::shared_ptr<std::string> failure;
  if (naive_engine) op->failure = failure = std::make_shared<std::string>();
  // The ticket and the push as one step: two threads pushing operations of one name on
  // one array would otherwise take tickets in one order and reach the engine in the other
  // (each waiting for the other: the engine for the array, the line for the name). Not
  // under NaiveEngine, whose push returns only when the collective is done (it would hold
  // every other thread's collectives, maybe the ones the peers wait for); its operations
  // never wait for the engine, only in their lines.
  static std::mutex* push_mu = new std::mutex();  // never destroyed: see Uses
  std::unique_lock<std::mutex> in_order(*push_mu, std::defer_lock);
  if (!naive_engine) in_order.lock();
  Register(op.get());  // before the engine may run it (inline, even)
  EngineOp* raw = op.release();
  int rc = MXEnginePushAsyncND(&RunOp, raw, &DeleteOp, ctx, reads, num_reads, writes, num_writes,
                               &prop, priority, opr_name, false);
  if (rc != 0) {  // MXNet took nothing: the operation is still ours (and kept, as before)
    TensorQueue::RunAdmitted(raw->set->queue.Finish(raw->names, raw->ticket));
    return Status::UnknownError("MXEnginePushAsyncND failed: " + LastMXNetError());
  }
  if (failure && !failure->empty()) return Status::Aborted("mxhorovod: " + *failure);
  return Status::OK();
}

namespace {
void RunNoop(void*, void* on_complete, void*) {
  EngineCallback cb;
  std::memcpy(&cb, on_complete, sizeof(cb));
  cb.fn(cb.engine, cb.param, nullptr);
}
}  // namespace

Status PushNoop(void* handle) {
  int ctx[2] = {kCPUContext[0], kCPUContext[1]};
  int prop = kAsyncProperty;  // as ours, so the row measures what ours pay
  int rc = MXEnginePushAsyncND(&RunNoop, nullptr, nullptr, ctx, nullptr, 0, &handle, 1, &prop, 0,
                               "HorovodNoop", false);
  if (rc != 0) return Status::UnknownError("MXEnginePushAsyncND failed: " + LastMXNetError());
  return Status::OK();
}

}  // namespace mx
}  // namespace mxhorovod
