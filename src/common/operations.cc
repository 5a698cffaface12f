// Global state and the background thread. The thread makes every MPI call of the library:
// MPI start-up, the communicators, each cycle's negotiation and the collectives.
#include "operations.h"

#include <mpi.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

#include "config.h"
#include "controller.h"
#include "executor.h"
#include "fusion.h"
#include "ops/mpi_backend.h"
#include "ops/mpi_wait.h"

namespace mxhorovod {
namespace {

struct State {
  std::mutex mu;                  // guards the fields below and the start/stop handshake
  std::condition_variable cv;
  bool running = false;           // background loop accepting work
  bool started = false;           // start-up finished (successfully or not)
  Status start_status;
  std::string stop_reason;
  Topology topo;
  bool threads_supported = false;
  std::thread thread;
  std::atomic<bool> shutdown_requested{false};
  bool we_initialized_mpi = false;
  TensorQueue queue;
};

State& S() {
  static State* s = new State();  // never destroyed: engine threads may outlive main()
  return *s;
}

Status MPICheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string(what) + " failed: " + MPIErrorString(rc));
}

// Groups the ranks by host name (not by a shared-memory split, which need not match the
// hosts) and returns the local and cross communicators' coordinates.
Status BuildTopology(MPI_Comm comm, Topology* t) {
  MPI_Comm_rank(comm, &t->rank);
  MPI_Comm_size(comm, &t->size);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> all(256 * t->size);
  auto s = MPICheck(MPI_Allgather(host, 256, MPI_CHAR, all.data(), 256, MPI_CHAR, comm), "MPI_Allgather");
  if (!s.ok()) return s;
  int color = 0;
  for (int r = 0; r < t->size; ++r) {
    if (std::strncmp(&all[256 * r], host, 256) == 0) { color = r; break; }
  }
  MPI_Comm local, cross;
  MPI_Comm_split(comm, color, t->rank, &local);
  MPI_Comm_rank(local, &t->local_rank);
  MPI_Comm_size(local, &t->local_size);
  MPI_Comm_split(comm, t->local_rank, t->rank, &cross);
  MPI_Comm_rank(cross, &t->cross_rank);
  MPI_Comm_size(cross, &t->cross_size);
  MPI_Comm_free(&local);
  MPI_Comm_free(&cross);
  return Status::OK();
}

Status StartMPI(int64_t comm_f2c, const std::vector<int>& ranks, MPI_Comm* comm, Topology* topo) {
  State& st = S();
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::PreconditionError("MPI has already been finalized in this process");
  MPI_Initialized(&inited);
  int provided = 0;
  if (!inited) {
    auto s = MPICheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    if (!s.ok()) return s;
    st.we_initialized_mpi = true;
  } else {
    MPI_Query_thread(&provided);
  }
  st.threads_supported = provided == MPI_THREAD_MULTIPLE;
  MPI_Comm parent = comm_f2c != kWorldComm ? MPI_Comm_f2c((MPI_Fint)comm_f2c) : MPI_COMM_WORLD;
  MPI_Comm sub = MPI_COMM_NULL;
  if (!ranks.empty()) {
    int prank = 0;
    MPI_Comm_rank(parent, &prank);
    bool member = false;
    for (int r : ranks) member |= (r == prank);
    if (!member) {
      return Status::InvalidArgument("init(comm=[...]): rank " + std::to_string(prank) +
                                     " of the parent communicator is not in the given ranks");
    }
    MPI_Group pgroup, group;
    MPI_Comm_group(parent, &pgroup);
    auto s = MPICheck(MPI_Group_incl(pgroup, (int)ranks.size(), ranks.data(), &group), "MPI_Group_incl");
    if (!s.ok()) return s;
    s = MPICheck(MPI_Comm_create_group(parent, group, 0x4876, &sub), "MPI_Comm_create_group");
    MPI_Group_free(&pgroup);
    MPI_Group_free(&group);
    if (!s.ok()) return s;
    parent = sub;
  }
  auto s = MPICheck(MPI_Comm_dup(parent, comm), "MPI_Comm_dup");
  if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
  if (!s.ok()) return s;
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  return BuildTopology(*comm, topo);
}

void FailEntries(std::vector<TensorTableEntry>&& entries, const std::string& why) {
  for (auto& e : entries) {
    e.callback(Status::Aborted(std::string(OpTypeName(e.request.op_type)) + " '" + e.request.name +
                               "' did not run: " + why));
  }
}

void RunCycle(Controller& controller, Executor& executor, const Config& cfg, CycleResult* result,
              Status* fatal) {
  State& st = S();
  *fatal = controller.ComputeResponses(st.shutdown_requested.load(), result);
  if (!fatal->ok()) return;
  // Error responses complete at once; the rest are planned into fusion groups.
  std::vector<Response> ok;
  for (auto& r : result->responses) {
    if (r.type == Response::kError) {
      for (const auto& n : r.names) {
        TensorTableEntry e;
        if (st.queue.Take(n, &e)) e.callback(Status::InvalidArgument(r.error));
      }
    } else {
      ok.push_back(std::move(r));
    }
  }
  std::vector<FusionItem> items;
  std::vector<TensorTableEntry*> local(ok.size());
  for (size_t i = 0; i < ok.size(); ++i) {
    local[i] = st.queue.Find(ok[i].names[0]);
    const Response& r = ok[i];
    int64_t bytes = local[i] ? local[i]->input.num_elements() * DTypeSize(r.dtype) : 0;
    // A tensor that fills a whole MPI call (MXHOROVOD_SLICE_BYTES) gains nothing from the
    // fusion buffer but two copies: it goes alone, reduced in place (a contiguous gradient
    // bucket of DistributedTrainer, a large weight).
    const bool fusable = r.op_type == OpType::kAllreduce && bytes < cfg.slice_bytes;
    items.push_back({fusable, r.op_type, r.dtype, r.reduce_op, r.prescale, r.postscale, bytes});
  }
  for (const auto& group : PlanFusion(items, cfg.fusion_threshold)) {
    std::vector<TensorTableEntry*> entries;
    for (int i : group) entries.push_back(local[i]);
    Status s;
    bool missing = false;
    for (auto* e : entries) missing |= (e == nullptr);
    if (missing) {
      s = Status::UnknownError("internal error: a negotiated tensor is not queued on this rank");
    } else {
      s = executor.Run(ok[group[0]], entries);
    }
    for (int i : group) {
      TensorTableEntry e;
      if (st.queue.Take(ok[i].names[0], &e)) e.callback(s);
    }
  }
}

void BackgroundLoop(int64_t comm_f2c, std::vector<int> ranks, Config cfg) {
  State& st = S();
  MPI_Comm comm = MPI_COMM_NULL;
  Topology topo;
  Status s = StartMPI(comm_f2c, ranks, &comm, &topo);
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.start_status = s;
    st.started = true;
    st.running = s.ok();
    if (s.ok()) st.topo = topo;
    st.stop_reason.clear();
  }
  st.cv.notify_all();
  if (!s.ok()) return;

  WaitPolicy policy;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && topo.local_size > cores) {
    // More ranks than cores: a waiting rank must give its core away almost at once.
    policy.spins = 4;
    policy.max_sleep_us = 1000;
  }
  SetWaitPolicy(policy);
  {
    MPIBackend backend(comm, cfg.slice_bytes);
    Executor executor(&backend, topo.rank, topo.size);
    Controller controller(comm, topo.rank, topo.size, (size_t)cfg.cache_capacity, &st.queue);
    const auto cycle = std::chrono::duration<double, std::milli>(cfg.cycle_time_ms);
    std::string reason;
    while (true) {
      auto start = std::chrono::steady_clock::now();
      CycleResult result;
      Status fatal;
      RunCycle(controller, executor, cfg, &result, &fatal);
      if (!fatal.ok()) { reason = fatal.reason(); break; }
      if (result.shutdown) {
        reason = st.shutdown_requested.load() ? "" : "a peer rank shut down (hvd.shutdown() or exit)";
        break;
      }
      std::this_thread::sleep_until(start + cycle);
    }
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.running = false;
      st.stop_reason = reason;
    }
    FailEntries(st.queue.TakeAll(), reason.empty() ? "mxhorovod was shut down on this rank" : reason);
  }
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm);
}

}  // namespace

Status Initialize(int64_t comm_f2c, const std::vector<int>& ranks) {
  State& st = S();
  std::unique_lock<std::mutex> lk(st.mu);
  if (st.running) return Status::OK();
  if (st.thread.joinable()) {  // stopped by a peer: collect the old thread first
    lk.unlock();
    st.thread.join();
    lk.lock();
  }
  Config cfg;
  try {
    cfg = Config::FromEnv();
  } catch (const std::exception& e) {
    return Status::InvalidArgument(e.what());
  }
  st.started = false;
  st.shutdown_requested = false;
  st.thread = std::thread(BackgroundLoop, comm_f2c, ranks, cfg);
  st.cv.wait(lk, [&] { return st.started; });
  if (!st.start_status.ok()) {
    lk.unlock();
    st.thread.join();
    return st.start_status;
  }
  return Status::OK();
}

void Shutdown() {
  State& st = S();
  st.shutdown_requested = true;
  if (st.thread.joinable()) st.thread.join();
  std::lock_guard<std::mutex> lk(st.mu);
  st.running = false;
  st.topo = Topology();
}

void FinalizeMPI() {
  Shutdown();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (S().we_initialized_mpi && !finalized) MPI_Finalize();
}

bool IsInitialized() {
  std::lock_guard<std::mutex> lk(S().mu);
  return S().running;
}

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

TensorQueue& Queue() { return S().queue; }

void Enqueue(std::vector<TensorTableEntry>&& entries) {
  State& st = S();
  {
    std::lock_guard<std::mutex> lk(st.mu);
    if (st.running) {
      st.queue.Add(std::move(entries));
      return;
    }
  }
  std::string why;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    why = st.stop_reason.empty() ? "mxhorovod is not running" : st.stop_reason;
  }
  FailEntries(std::move(entries), why);
}

}  // namespace mxhorovod
