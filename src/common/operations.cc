// The core's API for the adapters (operations.h): init() and shutdown, the process sets,
// and handing work to the background thread (background_loop.h), which makes every MPI call.
#include "operations.h"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>

#include "background_loop.h"
#include "config.h"
#include "logging.h"
#include "process_set.h"
#include "startup.h"
#include "state.h"
#include "timeline.h"

namespace mxhorovod {
namespace {

// At exit, the longest wait without any of this rank's collectives completing.
constexpr double kExitWaitS = 10;

}  // namespace

Status Initialize(int64_t comm_f2c, const std::vector<int>& ranks,
                  const std::vector<std::vector<int>>& process_sets, bool dynamic_process_sets,
                  const CpuQuotas& quotas) {
  State& st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  if (st.running) return Status::OK();
  if (!st.start_abandoned.empty()) return Status::PreconditionError(st.start_abandoned);
  if (st.thread.joinable() && !st.stop_reason.empty()) {
    // Stopped by a peer (or an error) and not shut down here since: the peers may be gone,
    // and starting again alone would wait for them forever.
    return Status::PreconditionError(
        "init(): mxhorovod was stopped (" + st.stop_reason + "); call hvd.shutdown() on this "
        "rank first, then init() on every rank together");
  }
  if (st.thread.joinable()) {  // collect the old thread first
    lk.unlock();
    st.thread.join();
    lk.lock();
  }
  // A bad setting is not refused here, before MPI starts: the peers would wait for this
  // rank in init() forever. MPI starts with the defaults and the error fails init() on
  // every rank (ShareSettingErrors).
  Config cfg;
  std::string cfg_error;
  try {
    cfg = Config::FromEnv();
  } catch (const std::exception& e) {
    cfg = Config();
    cfg_error = e.what();
  }
  ConfigureLogging(cfg.log, -1);
  st.started = false;
  st.shutdown_requested = false;
  st.dynamic_process_sets = dynamic_process_sets || cfg.dynamic_process_sets;
  st.owner_pid = getpid();
  static std::once_flag atfork;  // one handler for the life of the process
  std::call_once(atfork, [] { pthread_atfork(nullptr, nullptr, [] { S().forked_child = true; }); });
  st.exit_wait_s = std::min(kExitWaitS, cfg.stall.enabled ? cfg.stall.check_s : kExitWaitS);
  st.thread = std::thread(BackgroundLoop, StartArgs{comm_f2c, ranks, process_sets, cfg, cfg_error, quotas});
  const Status waited = WaitForStart(lk, cfg);
  if (!waited.ok()) {
    // The background thread is blocked in MPI for good: leave it there (a join would wait
    // forever), and let the process end with init()'s error.
    st.thread.detach();
    st.start_abandoned = waited.reason();
    return waited;
  }
  if (!st.start_status.ok()) {
    lk.unlock();
    st.thread.join();
    return st.start_status;
  }
  return Status::OK();
}

namespace {
// A child made by fork() after init() has a copy of the state but neither the background
// thread nor the MPI connection: those belong to the parent (joining the thread's copy
// hung the child's exit forever).
bool ForkedChild() { return S().forked_child.load(std::memory_order_relaxed); }
}  // namespace

bool WaitLocalWork() {
  State& st = S();
  if (ForkedChild()) return true;
  // Waits while the collectives keep completing: a peer blocked in another collective that
  // this rank will never call (it is exiting) makes no progress, and the exit must not wait
  // for it long (Horovod shuts down at once).
  const auto limit = std::chrono::duration<double>(st.exit_wait_s);
  auto last_progress = std::chrono::steady_clock::now();
  uint64_t seen = ~uint64_t{0};
  for (;;) {
    bool idle = true;
    uint64_t finished = 0;
    for (auto& set : st.sets.All()) {
      uint64_t n = 0;
      idle = set->queue.Idle(&n) && idle;
      finished += n;
    }
    if (idle || !IsInitialized()) return true;
    const auto now = std::chrono::steady_clock::now();
    if (finished != seen) {
      seen = finished;
      last_progress = now;
    } else if (now - last_progress >= limit) {
      return false;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void Shutdown() {
  State& st = S();
  if (ForkedChild()) return;
  st.shutdown_requested = true;
  Wake();
  if (st.thread.joinable()) st.thread.join();
  Timeline::Get().Stop();
  std::lock_guard<std::mutex> lk(st.mu);
  st.running = false;
  st.topo = Topology();
}

bool FinalizeMPI() {
  if (ForkedChild()) return false;
  Shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!S().we_initialized_mpi || finalized) return false;
  MPI_Finalize();
  return true;
}

bool IsInitialized() { return S().running.load(); }

std::string StopReason() {
  std::lock_guard<std::mutex> lk(S().mu);
  return S().stop_reason;
}

Topology GetTopology() {
  // Kept after a peer's shutdown stopped the loop (rank() still answers, as in Horovod);
  // cleared by this rank's own shutdown().
  std::lock_guard<std::mutex> lk(S().mu);
  return S().topo;
}

bool MPIThreadsSupported() { return S().threads_supported; }

std::vector<std::shared_ptr<ProcessSet>> ProcessSets() { return S().sets.All(); }

Status MemberSet(int32_t id, const char* op, const char* name, std::shared_ptr<ProcessSet>* out) {
  State& st = S();
  // Built only for an error: this runs once per collective call.
  auto what = [op, name] { return name ? std::string(op) + " '" + name + "'" : std::string(op); };
  if (ForkedChild()) {
    return Status::PreconditionError(what() + ": mxhorovod was initialized by the parent process (pid " +
                                     std::to_string(st.owner_pid) + "); a child made by fork() "
                                     "cannot run collectives");
  }
  // Checked first: a loop that stopped (a peer's shutdown, a stall shutdown) keeps its sets
  // registered until it has failed their pending entries.
  if (!IsInitialized()) {
    std::string why = StopReason();
    return Status::PreconditionError(what() + ": mxhorovod is not initialized" +
                                     (why.empty() ? "; call hvd.init() first" : " (" + why + ")"));
  }
  auto set = st.sets.Get(id);
  if (!set) {
    return Status::InvalidArgument(what() + ": process set " + std::to_string(id) +
                                   " is not registered (removed, or never added)");
  }
  if (!set->included) {
    return Status::InvalidArgument(what() + ": this rank (" + std::to_string(GetTopology().rank) +
                                   ") is not in " + set->Describe());
  }
  *out = std::move(set);
  return Status::OK();
}

namespace {

// Queues one entry on the global set and waits for its answer.
Status SubmitAndWait(const std::shared_ptr<ProcessSet>& global, TensorTableEntry e) {
  auto done = std::make_shared<std::promise<Status>>();
  auto fut = done->get_future();
  const std::vector<std::string> names{e.request.name};
  const uint64_t ticket = global->queue.Register(names);
  e.callback = [done, global, names, ticket](const Status& st2) {
    TensorQueue::RunAdmitted(global->queue.Finish(names, ticket));
    done->set_value(st2);
  };
  auto entries = std::make_shared<std::vector<TensorTableEntry>>();
  entries->push_back(std::move(e));
  auto submit = [entries] { Enqueue(std::move(*entries)); };
  if (global->queue.Admit(names, ticket, submit)) submit();
  return fut.get();
}

// Submits one control operation to the global set and waits for every rank to run it.
Status RunControlCall(OpType type, const std::string& what, std::vector<int64_t> shape) {
  State& st = S();
  std::shared_ptr<ProcessSet> global;
  Status s = MemberSet(0, what.c_str(), nullptr, &global);
  if (!s.ok()) return s;
  if (!st.dynamic_process_sets) {
    return Status::InvalidArgument(what + ": adding or removing process sets after init() needs "
                                   "HOROVOD_DYNAMIC_PROCESS_SETS=1 (or init(process_sets=\"dynamic\"))");
  }
  TensorTableEntry e;
  e.request.op_type = type;
  e.request.dtype = DataType::kInt64;
  e.request.name = std::string(OpTypeName(type)) + "." + std::to_string(st.control_calls++);
  e.request.shape = std::move(shape);
  return SubmitAndWait(global, std::move(e));
}

}  // namespace

Status AddProcessSet(const std::vector<int>& ranks, int32_t* id) {
  const std::string what = "add_process_set(" + RanksString(ranks) + ")";
  std::shared_ptr<ProcessSet> global;
  Status s = MemberSet(0, what.c_str(), nullptr, &global);
  if (!s.ok()) return s;
  std::vector<int> sorted;
  s = NormalizeRanks(ranks, global->size, &sorted);
  if (!s.ok()) return Status::InvalidArgument("add_process_set: " + s.reason());
  s = RunControlCall(OpType::kProcessSetAdd, what, std::vector<int64_t>(sorted.begin(), sorted.end()));
  if (!s.ok()) return s;
  *id = S().sets.Find(sorted);
  return Status::OK();
}

Status Join(int* last_joined_rank) {
  State& st = S();
  std::shared_ptr<ProcessSet> global;
  Status s = MemberSet(0, "join", nullptr, &global);
  if (!s.ok()) return s;
  if (st.joining.exchange(true)) {
    return Status::InvalidArgument("join: another join() of this rank (" + std::to_string(GetTopology().rank) +
                                   ") is still waiting (from another thread); call join() once at a time");
  }
  TensorTableEntry e;
  e.request.op_type = OpType::kJoin;
  e.request.dtype = DataType::kInt64;
  e.request.name = "join";
  s = SubmitAndWait(global, std::move(e));
  st.joining = false;
  if (s.ok()) *last_joined_rank = st.last_joined_rank.load();
  return s;
}

Status RemoveProcessSet(int32_t id) {
  const std::string what = "remove_process_set(" + std::to_string(id) + ")";
  if (id == 0) return Status::InvalidArgument(what + ": the global process set cannot be removed");
  if (IsInitialized() && !S().sets.Get(id)) {
    return Status::InvalidArgument(what + ": no process set with id " + std::to_string(id));
  }
  return RunControlCall(OpType::kProcessSetRemove, what, {id});
}

namespace {
// Why entries of set `id` cannot be queued: the loop stopped, or the set was removed.
std::string RefusedWhy(int32_t id) {
  State& st = S();
  std::lock_guard<std::mutex> lk(st.mu);
  if (!st.running) return st.stop_reason.empty() ? "mxhorovod is not running" : st.stop_reason;
  return "process set " + std::to_string(id) + " was removed";
}
}  // namespace

void Enqueue(std::vector<TensorTableEntry>&& entries) {
  const int32_t id = entries.empty() ? 0 : entries[0].request.process_set_id;
  auto set = S().running ? S().sets.Get(id) : nullptr;
  if (set) {
    Enqueue(*set, std::move(entries));
  } else {
    FailEntries(std::move(entries), RefusedWhy(id));
  }
}

void Enqueue(ProcessSet& set, std::vector<TensorTableEntry>&& entries) {
  // A queue refuses new entries once the loop has taken its last ones (stopped, or the
  // set removed: TakeAll); until then whatever it holds is run or failed by the loop.
  if (S().running && set.queue.Add(std::move(entries))) {
    Wake();
    return;
  }
  FailEntries(std::move(entries), RefusedWhy(set.id));
}

}  // namespace mxhorovod

