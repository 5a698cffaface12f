#include "background_loop.h"

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <limits>
#include <chrono>
#include <memory>
#include <mutex>

#include "autotune.h"
#include "controller.h"
#include "executor.h"
#include "fusion.h"
#include "host_cores.h"
#include "job_abort.h"
#include "logging.h"
#include "loop_stats.h"
#include "mpi_shm.h"
#include "ops/float16.h"
#include "ops/link_pace.h"
#include "ops/mpi_wait.h"
#include "ops/peer_watch.h"
#include "process_set.h"
#include "startup.h"
#include "state.h"
#include "stop_reason.h"
#include "timeline.h"

namespace mxhorovod {

void FailEntries(std::vector<TensorTableEntry>&& entries, const std::string& why) {
  for (auto& e : entries) {
    e.callback(Status::Aborted(std::string(OpTypeName(e.request.op_type)) + " '" + e.request.name +
                               "' did not run: " + why));
  }
}

namespace {

// A joined rank's part of a reduction: zeros for Sum, Average and Adasum, else the op's identity
// (Request::join_identity): the lowest value for Max, the highest for Min, 1 for Product.
template <typename T>
void FillAs(void* data, int64_t n, T v) {
  std::fill((T*)data, (T*)data + n, v);
}
template <typename T>
void FillTyped(ReduceOp op, void* data, int64_t n) {
  using L = std::numeric_limits<T>;
  if (op == ReduceOp::kMax) FillAs<T>(data, n, L::has_infinity ? -L::infinity() : L::lowest());
  if (op == ReduceOp::kMin) FillAs<T>(data, n, L::has_infinity ? L::infinity() : L::max());
  if (op == ReduceOp::kProduct) FillAs<T>(data, n, T(1));
}
void FillIdentity(ReduceOp op, DataType dt, void* data, int64_t n) {
  if (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kAdasum) return;  // zeros already
  switch (dt) {
    case DataType::kFloat32: FillTyped<float>(op, data, n); break;
    case DataType::kFloat64: FillTyped<double>(op, data, n); break;
    case DataType::kUInt8: FillTyped<uint8_t>(op, data, n); break;
    case DataType::kInt32: FillTyped<int32_t>(op, data, n); break;
    case DataType::kInt8: FillTyped<int8_t>(op, data, n); break;
    case DataType::kInt64: FillTyped<int64_t>(op, data, n); break;
    case DataType::kFloat16: {  // IEEE half: -inf 0xfc00, +inf 0x7c00, 1.0 0x3c00
      const uint16_t v = op == ReduceOp::kMax ? 0xfc00 : op == ReduceOp::kMin ? 0x7c00 : 0x3c00;
      FillAs<uint16_t>(data, n, v);
      break;
    }
  }
}

// Fails every entry of a set (stop, removal) with `why`.
void FailSet(ProcessSet& set, const std::string& why) { FailEntries(set.queue.TakeAll(), why); }

// add_process_set / remove_process_set, negotiated in the global set: every rank runs it
// at the same point of the same cycle. The ranks travel in the response (first_dims).
Status RunControl(const Response& r, MPI_Comm world, int world_rank, const Config& cfg) {
  State& st = S();
  std::vector<int> ranks(r.first_dims.begin(), r.first_dims.end());
  if (r.op_type == OpType::kProcessSetRemove) {
    std::shared_ptr<ProcessSet> set;
    {
      std::lock_guard<std::mutex> lk(st.mu);  // Enqueue checks the table under st.mu too
      if (ranks.size() == 1 && ranks[0] != 0) set = st.sets.Erase(ranks[0]);
    }
    if (!set) return Status::InvalidArgument("remove_process_set: no process set with id " +
                                             (ranks.empty() ? std::string("?") : std::to_string(ranks[0])));
    FailSet(*set, set->Describe() + " was removed");
    set->Close();
    return Status::OK();
  }
  int32_t existing = st.sets.Find(ranks);
  // Every rank takes part in the split (a collective of the whole job), even to refuse.
  bool member = std::binary_search(ranks.begin(), ranks.end(), world_rank);
  MPI_Comm comm = MPI_COMM_NULL;
  int rc = MPI_Comm_split(world, existing < 0 && member ? 0 : MPI_UNDEFINED, world_rank, &comm);
  if (rc != MPI_SUCCESS) return MPICheck(rc, "MPI_Comm_split (add_process_set)");
  if (existing >= 0) {
    return Status::InvalidArgument("add_process_set: a process set with ranks " + RanksString(ranks) +
                                   " already exists (id " + std::to_string(existing) + ")");
  }
  auto set = std::make_shared<ProcessSet>();
  set->id = st.next_set_id++;
  set->ranks = ranks;
  set->size = (int)ranks.size();
  set->included = member;
  if (member) set->Open(comm, cfg);
  st.sets.Put(set);
  return Status::OK();
}

// Why the loop stops after a global cycle whose result says shutdown ("" when this rank
// asked).
std::string StopReasonOf(const CycleResult& result, const Config& cfg) {
  if (S().shutdown_requested.load()) return "";
  if (result.stall_shutdown) return StallInspector::ShutdownReason(cfg.stall);
  return PeerShutdownReason(result.shutdown_ranks);
}

// bytes_done: payload bytes of the collectives run (for the autotuner).
void RunCycle(ProcessSet& set, bool shutdown_requested, MPI_Comm world, int world_rank,
              const Config& cfg, CycleResult* result, Status* fatal, int64_t* bytes_done) {
  *bytes_done = 0;
  Timeline& timeline = Timeline::Get();
  timeline.SetProcessSet(set.id, &set.ranks);  // [timeline] rows of this set
  LoopStats& stats = Stats();                   // [stats] benchmarks/call_cost.py
  const uint64_t t_start = NowNs();
  *fatal = set.controller->ComputeResponses(shutdown_requested, result);
  const uint64_t t_mark = NowNs();
  AddTo(stats.cycles, 1);
  AddTo(stats.negotiate_ns, t_mark - t_start);
  if (!fatal->ok()) return;
  uint64_t t_execute = 0, t_complete = 0;  // summed over the groups below
  if (result->shutdown && set.id == 0) {
    // Stopped before this cycle's callbacks run: a caller woken by one of its errors (a
    // stall shutdown's) already finds mxhorovod stopped, and new calls are refused.
    State& st = S();
    std::lock_guard<std::mutex> lk(st.mu);
    st.running = false;
    st.stop_reason = StopReasonOf(*result, cfg);
  }
  if (!result->responses.empty()) timeline.MarkCycle();  // [timeline]
  timeline.Responses(result->responses);                 // [timeline]
  // Error responses complete at once, control operations run in order; the rest are
  // planned into fusion groups.
  std::vector<const Response*> ok;  // into result->responses (the autotuner reads them later)
  for (auto& r : result->responses) {
    if (r.type == Response::kError) {
      for (const auto& n : r.names) {
        TensorTableEntry e;
        if (set.queue.Take(n, &e)) e.callback(Status::InvalidArgument(r.error));
      }
    } else if (r.op_type == OpType::kJoin) {
      // Every rank has joined: the caller reads the rank that joined last.
      S().last_joined_rank = r.first_dims.empty() ? -1 : (int)r.first_dims[0];
      TensorTableEntry e;
      if (set.queue.Take(r.names[0], &e)) e.callback(Status::OK());
      timeline.OpEnd(r.names[0]);  // [timeline]
    } else if (IsControl(r.op_type)) {
      Status s = RunControl(r, world, world_rank, cfg);
      TensorTableEntry e;
      if (set.queue.Take(r.names[0], &e)) e.callback(s);
      timeline.OpEnd(r.names[0]);  // [timeline]
    } else {
      ok.push_back(&r);
    }
  }
  // The entries leave the queue here, under one lock; this thread runs and completes them.
  std::vector<const std::string*> keys;
  keys.reserve(ok.size());
  for (const Response* r : ok) keys.push_back(&r->names[0]);
  std::vector<TensorTableEntry> taken;
  std::vector<char> found;
  set.queue.TakeMany(keys, &taken, &found);
  // This rank has joined (hvd.join()): it adds zeros to the allreduces it lacks.
  std::vector<std::vector<char>> zeros;
  std::vector<char> joined_part(ok.size(), 0);
  for (size_t i = 0; i < ok.size(); ++i) {
    const Response& r = *ok[i];
    if (found[i] || r.joined.empty() || r.op_type != OpType::kAllreduce) continue;
    zeros.emplace_back((size_t)(r.elements * DTypeSize(r.dtype)), 0);
    FillIdentity(r.reduce_op, r.dtype, zeros.back().data(), r.elements);
    TensorTableEntry& e = taken[i];
    e.request.op_type = r.op_type;
    e.request.dtype = r.dtype;
    e.request.name = r.names[0];
    e.input.data = e.output.data = zeros.back().data();
    e.input.elements = e.output.elements = r.elements;
    e.callback = nullptr;
    found[i] = 1;
    joined_part[i] = 1;
  }
  std::vector<FusionItem> items;
  items.reserve(ok.size());
  // A backend that reduces groups in place (cross-memory attach) takes allreduces of every size.
  const bool groups_in_place = set.executor->in_place_min_bytes() >= 0;
  for (size_t i = 0; i < ok.size(); ++i) {
    const Response& r = *ok[i];
    int64_t bytes = found[i] ? taken[i].input.num_elements() * DTypeSize(r.dtype) : 0;
    // A tensor of zero_copy_bytes or more is reduced in place: copying it into the
    // fusion buffer and back costs more than the MPI call it would save.
    bool fusable = (r.op_type == OpType::kAllreduce || r.op_type == OpType::kReducescatter) &&
                   (bytes < cfg.zero_copy_bytes ||
                    (r.op_type == OpType::kAllreduce && groups_in_place));
    items.push_back({fusable, r.op_type, r.dtype, r.reduce_op, r.prescale, r.postscale, bytes});
    *bytes_done += bytes;
  }
  std::vector<TensorTableEntry*> entries;
  for (const auto& group : PlanFusion(items, cfg.fusion_threshold)) {
    entries.clear();
    bool missing = false;
    for (int i : group) {
      entries.push_back(&taken[i]);
      missing |= !found[i];
    }
    Status s;
    const uint64_t t0 = NowNs();
    if (missing) {
      s = Status::UnknownError("internal error: a negotiated tensor is not queued on this rank");
    } else {
      timeline.ActivityEndAll(entries);  // [timeline] QUEUE
      s = set.executor->Run(*ok[group[0]], entries);
    }
    const uint64_t t1 = NowNs();
    t_execute += t1 - t0;
    AddTo(stats.groups, 1);
    AddTo(stats.tensors, group.size());
    for (int i : group) {
      if (found[i] && !joined_part[i]) {
        // Completed early by the executor (its buffer final while the group ran): no
        // callback left, and its timeline row closed there.
        if (!taken[i].callback) continue;
        taken[i].callback(s);
      }
      timeline.OpEnd(ok[i]->names[0]);  // [timeline]
    }
    t_complete += NowNs() - t1;
  }
  // [stats] The rest of the cycle: error responses, control operations, taking the
  // entries and planning the groups.
  const uint64_t spent = NowNs() - t_mark;
  AddTo(stats.plan_ns, spent > t_execute + t_complete ? spent - t_execute - t_complete : 0);
  AddTo(stats.execute_ns, t_execute);
  AddTo(stats.complete_ns, t_complete);
}

// Registers the sets given to init(): checks that every rank passed the same list.
Status StartStaticSets(MPI_Comm world, int world_rank, int world_size,
                       const std::vector<std::vector<int>>& lists, const Config& cfg) {
  std::vector<std::vector<int>> sorted;
  for (const auto& l : lists) {
    std::vector<int> v;
    Status s = NormalizeRanks(l, world_size, &v);
    if (!s.ok()) return Status::InvalidArgument("init(process_sets=...): " + s.reason());
    sorted.push_back(v);
  }
  // FNV-1a of the lists, compared by MIN and MAX over the ranks.
  uint64_t h = 1469598103934665603ull;
  for (const auto& v : sorted) {
    for (int r : v) h = (h ^ (uint64_t)(r + 1)) * 1099511628211ull;
    h = (h ^ 0xffffffffull) * 1099511628211ull;
  }
  uint64_t mm[2] = {h, ~h};
  int rc = MPI_Allreduce(MPI_IN_PLACE, mm, 2, MPI_UINT64_T, MPI_MAX, world);
  if (rc != MPI_SUCCESS) return MPICheck(rc, "MPI_Allreduce (process sets)");
  if (mm[0] != h || ~mm[1] != h) {
    return Status::InvalidArgument("init(process_sets=...): the ranks passed different process sets "
                                   "(every rank must pass the same list in the same order)");
  }
  for (const auto& v : sorted) {
    if (S().sets.Find(v) >= 0) continue;  // e.g. the global set's ranks: the same set
    Response r;
    r.op_type = OpType::kProcessSetAdd;
    r.first_dims.assign(v.begin(), v.end());
    Status s = RunControl(r, world, world_rank, cfg);
    if (!s.ok()) return Status::InvalidArgument("init(process_sets=...): " + s.reason());
  }
  return Status::OK();
}

}  // namespace

void BackgroundLoop(StartArgs args) {
  // Named so that `top -H`, `ps -L`, perf and /proc/<pid>/task/*/comm show which thread is
  // ours (the communication) and which are the model's.
  pthread_setname_np(pthread_self(), "mxhorovod-bg");
  State& st = S();
  Stats().Reset();  // [stats] this job's, from before init() returns
  Config& cfg = args.cfg;
  MPI_Comm comm = MPI_COMM_NULL;
  Topology topo;
  HostComms hc;
  int hierarchical = cfg.hierarchical_allreduce;
  Status s = StartMPI(args.comm_f2c, args.ranks, &hierarchical, cfg,
                      args.cfg_error, &comm, &topo, &hc);
  if (s.ok()) s = AgreeOnSettings(comm, topo, st.dynamic_process_sets, &cfg);
  if (s.ok()) s = CheckMPIShmOwners(comm, topo.rank);
  std::shared_ptr<ProcessSet> global;
  if (s.ok()) {
    ConfigureLogging(cfg.log, topo.rank);
    // Each rank its own float16 kernels: every path gives the same bits (ops/float16.h).
    SimdPath want = SimdPath::kAVX2;
    ParseSimdPath(cfg.simd, &want);
    const SimdPath simd = SetSimdPath(want);
    if (cfg.simd == "avx2" && simd != want) {
      LogWarning("MXHOROVOD_SIMD=avx2: this CPU lacks AVX2 or F16C; float16 reductions and "
                 "scaling use the portable kernels");
    }
    LogDebug(std::string("float16 kernels: ") + SimdPathName(simd));
    if (!st.we_initialized_mpi && !st.threads_supported) {
      // As Horovod warns: this thread makes MPI calls while the script's threads may too.
      LogWarning("MPI was initialized before hvd.init() without MPI_THREAD_MULTIPLE (e.g. "
                 "mpi4py.rc.thread_level): mxhorovod's background thread makes MPI calls, so "
                 "MPI calls from the script (mpi4py) while it trains are unsafe; initialize "
                 "MPI with MPI_THREAD_MULTIPLE (mpi4py's default) or let hvd.init() do it");
    }
    // [timeline] HOROVOD_TIMELINE, written by rank 0 as in Horovod; started before init()
    // returns, so a start_timeline() right after init() finds it.
    if (topo.rank == 0 && !cfg.timeline.empty()) {
      Status ts = Timeline::Get().Start(cfg.timeline, cfg.timeline_mark_cycles);
      if (!ts.ok()) LogError("HOROVOD_TIMELINE: " + ts.reason() + "; recording no timeline");
    }
    global = std::make_shared<ProcessSet>();
    global->id = 0;
    for (int r = 0; r < topo.size; ++r) global->ranks.push_back(r);
    global->size = topo.size;
    global->included = true;
    global->Open(comm, cfg);
    if (hierarchical > 0) global->UseHierarchical(hc.local, hc.cross, cfg);
    st.next_set_id = 1;
    st.sets.Put(global);
    s = StartStaticSets(comm, topo.rank, topo.size, args.process_sets, cfg);
    if (!s.ok()) {
      for (auto& set : st.sets.Clear()) set->Close();
    }
  }
  if (!s.ok()) {
    if (global) comm = MPI_COMM_NULL;  // the global set owned and freed it
    FreeComms({&comm, &hc.local, &hc.cross});
  }
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
  const HostCores cores = CountHostCores(hc.local, args.quotas);
  const bool crowded = topo.local_size > cores.usable;
  if (crowded) {
    // More ranks than cores: a waiting rank must give its core away almost at once.
    policy.spins = 4;
    policy.max_sleep_us = 1000;
    policy.data_busy_us = 0;
  }
  LogDebug("this host: " + std::to_string(topo.local_size) +
           (topo.local_size == 1 ? " rank, " : " ranks, ") + cores.Describe() +
           (crowded ? ": more ranks than cores, waits give the core away at once"
                    : ": a core per rank, data waits test back to back first"));
  // After CountHostCores, which reads this thread's affinity as the process's.
  if (!cfg.thread_affinity.empty()) {
    PinToCore(cfg.thread_affinity, topo.local_rank, topo.local_size);
  }
  if (cfg.blocking_data >= 0) policy.blocking_data = cfg.blocking_data != 0;
  // Plus a cycle: a peer with nothing to do may sleep that long before negotiating.
  policy.warn_after_s = cfg.stall.enabled ? cfg.stall.check_s + cfg.cycle_time_ms / 1000 : 0;
  policy.transfer_base_s = cfg.transfer_timeout_s;
  policy.transfer_min_mbits = cfg.transfer_min_mbits;
  SetWaitPolicy(policy);
  ResetLinkPace(cfg.link_sleep_us);  // a new job (init after shutdown) measures its own links
  LogDebug(std::string("doorbell: ") +
           (OpenDoorbell(comm, hc.local, cfg.doorbell)
                ? "every rank of the job can wake every other"
                : "not on every rank of the job (another host, MXHOROVOD_DOORBELL=0, no or a full "
                  "/dev/shm): waits sleep on timers where it is missing"));
  // Every rank of this host has mapped MPICH's shared memory by now (each passed MPI_Init,
  // and they met in OpenDoorbell's collectives over hc.local), so its names can go: a job
  // whose ranks are all SIGKILLed leaves no /dev/shm/mpich_shm_* behind (1-2 MB of RAM each
  // until a reboot). MPI_Finalize's own unlink then finds no name, which MPICH ignores.
  ReleaseMPIShmNames();
  WatchLocalPeers(hc.local, topo.rank);  // a wait for a peer that has ended ends the job
  Config live = cfg;  // the autotuner changes it while running
  auto cycle = std::chrono::duration<double, std::milli>(cfg.cycle_time_ms);
  std::unique_ptr<Autotuner> tuner;
  if (cfg.autotune) tuner.reset(new Autotuner(cfg, comm, topo.rank));
  auto apply = [&](const TunedParams& p) {
    live.fusion_threshold = p.fusion_threshold;
    live.zero_copy_bytes = p.zero_copy_bytes;
    live.slice_bytes = p.slice_bytes;
    cycle = std::chrono::duration<double, std::milli>(p.cycle_time_ms);
    for (auto& set : st.sets.All()) set->SetSliceBytes(p.slice_bytes);
  };
  if (tuner) apply(tuner->params());
  std::string reason;
  bool stop = false;
  int unanswered_cycles = 0;  // cycles in a row that answered none of our pending work
  int idle_cycles = 0;        // cycles in a row with nothing queued here and nothing answered
  const std::chrono::duration<double, std::milli> kRetryWait(0.05);
  const std::chrono::duration<double, std::milli> kIdleWait(20.0);
  const int kIdleDoublings = 4;  // an idle rank's wait doubles up to 16 x kIdleWait (320 ms)
  while (!stop) {
    auto start = std::chrono::steady_clock::now();
    // The global set first (it carries shutdown and the add/remove of sets), then the
    // other sets this rank belongs to, in id order: the same sequence on every member.
    CycleResult result;
    Status fatal;
    int64_t bytes = 0;
    SetPeerLate(unanswered_cycles > 0);
    RunCycle(*global, st.shutdown_requested.load(), comm, topo.rank, live, &result, &fatal, &bytes);
    if (!fatal.ok()) { reason = fatal.reason(); break; }
    if (result.shutdown) {
      reason = StopReasonOf(result, live);
      break;
    }
    if (tuner && tuner->active() && tuner->Update(result.responses, bytes)) apply(tuner->params());
    for (auto& set : st.sets.All()) {
      if (set->id == 0 || !set->included) continue;
      RunCycle(*set, false, comm, topo.rank, live, &result, &fatal, &bytes);
      if (!fatal.ok()) {
        reason = set->Describe() + ": " + fatal.reason();
        stop = true;
        break;
      }
    }
    if (!stop) {
      // Sleep out the cycle unless new work (or shutdown) arrives: a rank with work
      // starts negotiating at once, and its peers join as soon as theirs arrives. A rank
      // with nothing queued sleeps longer (kIdleWait; new work wakes it at once): a peer
      // with work then waits for it inside the negotiation (WaitRequest: yield, then
      // sleep) until the same work arrives here, which in data-parallel training it must
      // do anyway. Cycling every HOROVOD_CYCLE_TIME instead (what this loop did for the
      // first 100 idle cycles) made each burst of gradients cost the rank ahead one
      // fruitless negotiation per cycle of its peer, each starting with a yield loop:
      // ~50 negotiations per MNIST step on 2 ranks, and about a third of the background
      // thread's CPU (docs/benchmarks.md, eleventh run). Not with process sets: their
      // members would wait for an idle non-member's global cycle.
      // A rank whose submitted work is still unanswered starts the next cycle at once:
      // its peer may have submitted just after this cycle's negotiation began, and would
      // otherwise wait a whole cycle for us (seen: 1.6 ms for a 16 KiB allreduce). The
      // next negotiation then waits in WaitRequest for the peers. Only once, then with a
      // pause doubling from kRetryWait up to the cycle time: a rank ahead of its peers
      // (in backward, the peers' gradients come later) would otherwise negotiate back to
      // back and take CPU from its own model's threads.
      bool pending = false;
      auto sets = st.sets.All();
      for (auto& set : sets) pending = pending || !set->queue.Empty();
      const bool idle = !pending && sets.size() == 1;
      unanswered_cycles = pending && result.responses.empty() ? unanswered_cycles + 1 : 0;
      // An idle spell's wait doubles each idle cycle from kIdleWait (20, 40, ... 320 ms):
      // each negotiation of two idle ranks cost ~100 us of CPU, 50 a second (0.005 CPU s/s,
      // idle_cpu.py). Nothing is slower for it: new work here wakes this thread at once, a
      // peer's work waits for this rank's own (data-parallel ranks submit alike), and what
      // an idle rank must hear without work of its own (a peer's shutdown, the stall
      // inspector's report on the coordinator) arrives within the wait, far below
      // HOROVOD_STALL_CHECK_TIME_SECONDS. Ranks idle alike count alike, so their waits stay
      // in step (a rank ahead would poll inside the negotiation for the whole gap). Not
      // while the autotuner measures cycles.
      idle_cycles = idle && result.responses.empty() && !(tuner && tuner->active())
                        ? idle_cycles + 1 : 0;
      const auto idle_wait =
          kIdleWait * double(1 << std::min(std::max(idle_cycles - 1, 0), kIdleDoublings));
      auto wait = idle ? std::max<std::chrono::duration<double, std::milli>>(cycle, idle_wait) : cycle;
      if (pending) {
        wait = unanswered_cycles <= 1
                   ? std::chrono::duration<double, std::milli>(0)
                   : std::min<std::chrono::duration<double, std::milli>>(
                         cycle, kRetryWait * double(1 << std::min(unanswered_cycles - 2, 10)));
      }
      // The retry pause counts from now (the negotiation may have waited for the peers);
      // the cycle from its start.
      const auto until = (pending ? std::chrono::steady_clock::now() : start) +
                         std::chrono::duration_cast<std::chrono::steady_clock::duration>(wait);
      std::unique_lock<std::mutex> lk(st.wake_mu);
      if (wait.count() > 0 && !st.wake.load()) {
        const uint64_t slept = NowNs();
        st.wake_cv.wait_until(lk, until, [&] { return st.wake.load(); });
        AddTo(Stats().sleep_ns, NowNs() - slept);
      }
      // Work enqueued before a later Wake is already queued: the next cycle sees it.
      st.wake = false;
    }
  }
  StopWatchingPeers();  // after a shutdown the peers exit as they please
  std::vector<std::shared_ptr<ProcessSet>> sets;
  {
    std::lock_guard<std::mutex> lk(st.mu);
    st.running = false;
    st.stop_reason = reason;
    sets = st.sets.Clear();
  }
  if (!reason.empty()) LogDebug("stopped: " + reason);
  for (auto& set : sets) {
    std::vector<TensorTableEntry> left = set->queue.TakeAll();
    std::string why = WithPendingNames(reason.empty() ? "mxhorovod was shut down on this rank" : reason, left);
    FailEntries(std::move(left), why);
    set->Close();  // frees comm for the global set
  }
  CloseDoorbell();
  FreeComms({&hc.local, &hc.cross});
  Timeline::Get().Stop();  // [timeline] the closing bracket, whoever stopped the loop
}

}  // namespace mxhorovod
