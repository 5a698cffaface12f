// Global state and the background thread. The thread makes every MPI call of the library:
// MPI start-up, the communicators, each cycle's negotiation and the collectives.
#include "operations.h"

#include <mpi.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "autotune.h"
#include "config.h"
#include "controller.h"
#include "executor.h"
#include "fusion.h"
#include "launcher_check.h"
#include "setting_errors.h"
#include "logging.h"
#include "ops/mpi_hierarchical.h"
#include "ops/mpi_wait.h"
#include "process_set.h"
#include "stop_reason.h"
#include "timeline.h"

namespace mxhorovod {
namespace {

struct State {
  std::mutex mu;                  // guards the fields below and the start/stop handshake
  std::condition_variable cv;
  // Background loop accepting work; written under `mu` (with stop_reason), read without it
  // by the calls (MemberSet: once per collective).
  std::atomic<bool> running{false};
  bool started = false;           // start-up finished (successfully or not)
  Status start_status;
  std::string stop_reason;
  Topology topo;
  bool threads_supported = false;
  std::thread thread;
  std::atomic<bool> shutdown_requested{false};
  bool we_initialized_mpi = false;
  bool dynamic_process_sets = false;
  pid_t owner_pid = 0;            // the process that started the loop (not a forked child)
  std::atomic<bool> forked_child{false};  // set in a child of fork() (pthread_atfork)
  double exit_wait_s = 0;         // WaitLocalWork's limit without progress (Initialize)
  ProcessSetTable sets;           // the global set (id 0) and the others, while running
  int32_t next_set_id = 1;        // background thread only: same sequence on every rank
  std::atomic<uint64_t> control_calls{0};  // names of add/remove calls, in call order
  // New work wakes the background thread before its cycle time is up. `wake` is set
  // before wake_mu is taken, so only the first call after each wait takes the lock and
  // signals; the rest of a burst of calls see it set and skip both.
  std::mutex wake_mu;
  std::condition_variable wake_cv;
  std::atomic<bool> wake{false};
  // Set by the background thread while it is blocked at start-up in MPI_Init_thread (which
  // waits for every rank of the job to start MPI) or in MPI_Comm_create_group (init with a
  // list of ranks): what it waits for, and its rank (and the number of ranks, -1 when not
  // given) as far as it knows them, for Initialize's warnings (WaitForStart).
  std::string init_waiting_for;
  int init_waiting_rank = -1;
  int init_waiting_size = -1;
  // While blocked in MPI_Init_thread, which waits for every rank of the job: Initialize
  // looks whether a rank of this host has exited meanwhile (WaitForStart).
  bool init_watch = false;
  // Set when init() gave up waiting for a rank that had exited: the background thread is
  // left blocked in MPI for good (detached), and init() refuses with this text from then on.
  std::string start_abandoned;
};


// At exit, the longest wait without any of this rank's collectives completing.
constexpr double kExitWaitS = 10;

State& S() {
  static State* s = new State();  // never destroyed: engine threads may outlive main()
  return *s;
}

void Wake() {
  State& st = S();
  if (st.wake.exchange(true)) return;  // the loop has not consumed the last one yet
  // The lock orders this signal after the loop's check of `wake` (made under wake_mu,
  // then waiting): the signal cannot fall between them and be lost.
  { std::lock_guard<std::mutex> lk(st.wake_mu); }
  st.wake_cv.notify_one();
}

Status MPICheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string(what) + " failed: " + MPIErrorString(rc));
}

// The communicators of the host grouping, kept for the hierarchical allreduce; freed when
// the background loop ends.
struct HostComms {
  MPI_Comm local = MPI_COMM_NULL;  // the ranks of this host
  MPI_Comm cross = MPI_COMM_NULL;  // the ranks with this local rank, one per host
};

// Frees communicators that are not null (unless MPI is finalized).
void FreeComms(std::initializer_list<MPI_Comm*> comms) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : comms) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

// Groups the ranks by host name (not by a shared-memory split, which need not match the
// hosts) and returns the local and cross communicators and their coordinates.
Status BuildTopology(MPI_Comm comm, Topology* t, HostComms* hc) {
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
  hc->local = local;
  hc->cross = cross;
  return Status::OK();
}

// Every rank of `parent` must call init(); one whose peers never do (a script that calls
// hvd.init() on some ranks only, or a peer stuck before it) waited in the first collective
// forever without a word. So the first collective is an MPI_Ibarrier, tested every
// millisecond (init() may take that much longer); while it lasts, a warning every HOROVOD_STALL_CHECK_TIME_SECONDS (at least
// kInitWarnS: ranks importing MXNet on a busy machine reach init() seconds apart) says what
// this rank waits for. It keeps waiting: a peer may legitimately reach init() late.
constexpr double kInitWarnS = 30;

// How often a rank waiting in init() looks whether a rank of its host has exited.
constexpr auto kExitLook = std::chrono::seconds(1);

// init()'s error when a rank it waits for has exited (`gone`: ExitedLocalRanks's text).
std::string ExitedAtInit(const std::string& gone, int rank, int size) {
  std::string who = rank >= 0 ? "rank " + std::to_string(rank) : "this rank";
  if (rank >= 0 && size > 0) who += " of " + std::to_string(size);
  return "init(): " + gone + " before calling hvd.init(), while " + who +
         " waited for it there; every rank of the job must call hvd.init() (a rank left out "
         "of init(comm=[...]) must still start MPI, as importing mpi4py does), so this rank "
         "stops waiting. Look at the output of the exited rank for why it ended (an exception, "
         "sys.exit or os._exit before hvd.init(), a crash)";
}

// The interval of init()'s warnings, as a clock duration: at most a day, so that a huge
// HOROVOD_STALL_CHECK_TIME_SECONDS (up to 1e15 s) cannot overflow the clock's nanoseconds.
std::chrono::steady_clock::duration InitWarnInterval(const StallSettings& stall) {
  const double s = std::min(std::max(stall.check_s, kInitWarnS), 86400.0);
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

Status WaitForPeersAtInit(MPI_Comm parent, const Config& cfg) {
  const StallSettings& stall = cfg.stall;
  MPI_Request req;
  auto s = MPICheck(MPI_Ibarrier(parent, &req), "MPI_Ibarrier (init)");
  if (!s.ok()) return s;
  int rank = 0, size = 0;
  MPI_Comm_rank(parent, &rank);
  MPI_Comm_size(parent, &size);
  ConfigureLogging(cfg.log, rank);  // the job's rank (no list of ranks given to init)
  const auto start = std::chrono::steady_clock::now();
  const auto every = InitWarnInterval(stall);
  auto next_warning = start + every;
  for (;;) {
    int done = 0;
    s = MPICheck(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "MPI_Test (init)");
    if (!s.ok() || done) return s;
    const auto now = std::chrono::steady_clock::now();
    if (stall.enabled && now >= next_warning) {
      const long waited = (long)std::chrono::duration<double>(now - start).count();
      LogWarning("init(): rank " + std::to_string(rank) + " of " + std::to_string(size) +
                 " has waited " + std::to_string(waited) + " s for the other ranks to call "
                 "hvd.init() (every rank of the job must; still waiting)");
      next_warning += every;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

Status StartMPI(int64_t comm_f2c, const std::vector<int>& ranks, bool hierarchical,
                const Config& cfg, const std::string& cfg_error, MPI_Comm* comm, Topology* topo,
                HostComms* hc) {
  State& st = S();
  int inited = 0, finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return Status::PreconditionError("MPI has already been finalized in this process");
  MPI_Initialized(&inited);
  int provided = 0;
  if (!inited) {
    auto s = CheckLauncherConnection();
    if (s.ok()) s = ClaimLauncherConnection();
    if (!s.ok()) return s;
    // MPI_Init_thread itself waits for every rank of the job to start MPI (MPICH's PMI
    // exchange), so a script calling hvd.init() on some ranks only (and not importing
    // mpi4py, which starts MPI at import) waited here, before the Ibarrier of
    // WaitForPeersAtInit, without a word. The thread in Initialize warns meanwhile
    // (WaitForStart), with the rank and size the launcher gave (PMI_RANK, PMI_SIZE, ...).
    int env_rank = -1, env_size = -1;
    LauncherRankAndSize(&env_rank, &env_size);
    if (env_rank >= 0) ConfigureLogging(cfg.log, env_rank);
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.init_waiting_rank = env_rank;
      st.init_waiting_size = env_size;
      st.init_waiting_for = "the other ranks to call hvd.init() (every rank of the job must; "
                            "still waiting)";
      st.init_watch = true;
    }
    s = MPICheck(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.init_waiting_for.clear();
      st.init_watch = false;
    }
    if (!s.ok()) return s;
    st.we_initialized_mpi = true;
  } else {
    MPI_Query_thread(&provided);
  }
  st.threads_supported = provided == MPI_THREAD_MULTIPLE;
  MPI_Comm parent = comm_f2c != kWorldComm ? MPI_Comm_f2c((MPI_Fint)comm_f2c) : MPI_COMM_WORLD;
  MPI_Comm sub = MPI_COMM_NULL;
  if (!ranks.empty()) {
    int prank = 0, psize = 0;
    MPI_Comm_rank(parent, &prank);
    MPI_Comm_size(parent, &psize);
    // Checked here, not by MPI_Group_incl: its error handler is MPI_COMM_WORLD's (fatal),
    // so a rank out of range aborted the whole job.
    for (int r : ranks) {
      if (r < 0 || r >= psize) {
        return Status::InvalidArgument("init(comm=[...]): rank " + std::to_string(r) +
                                       " is out of range (the parent communicator has " +
                                       RankCount(psize) + ": 0 to " +
                                       std::to_string(psize - 1) + ")");
      }
    }
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
    // Collective over the listed ranks only, with no nonblocking form: the Ibarrier of
    // WaitForPeersAtInit would need a communicator of just these ranks (what this makes),
    // and one over the parent would wait for unlisted ranks that never call init(). So
    // this thread blocks here, and the thread in Initialize, waiting for the start-up
    // anyway, warns meanwhile (WaitForStart) without an MPI call.
    ConfigureLogging(cfg.log, prank);  // the parent's rank (the job's is not known yet)
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ", ") + std::to_string(r);
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.init_waiting_rank = prank;
      st.init_waiting_size = -1;  // the list's members are named instead
      st.init_waiting_for = "the other listed ranks to call hvd.init(comm=[" + list +
                            "]) (every rank listed must, with the same list; still waiting)";
    }
    s = MPICheck(MPI_Comm_create_group(parent, group, 0x4876, &sub), "MPI_Comm_create_group");
    {
      std::lock_guard<std::mutex> lk(st.mu);
      st.init_waiting_for.clear();
    }
    MPI_Group_free(&pgroup);
    MPI_Group_free(&group);
    if (!s.ok()) return s;
    parent = sub;
  } else {
    // (With a list of ranks, MPI_Comm_create_group above is the first collective, over the
    // listed ranks only.)
    auto s = WaitForPeersAtInit(parent, cfg);
    if (!s.ok()) return s;
  }
  auto s = MPICheck(MPI_Comm_dup(parent, comm), "MPI_Comm_dup");
  if (sub != MPI_COMM_NULL) MPI_Comm_free(&sub);
  if (!s.ok()) return s;
  MPI_Comm_set_errhandler(*comm, MPI_ERRORS_RETURN);
  s = ShareSettingErrors(*comm, cfg_error);
  if (!s.ok()) return s;
  s = BuildTopology(*comm, topo, hc);
  if (!s.ok()) return s;
  return AgreeOnHierarchical(*comm, hierarchical);
}

// The settings that decide which MPI calls a cycle makes must be the same on every rank:
// the fusion threshold, the zero-copy size and the slice size group and split the data
// calls, the cache capacity sizes the negotiation's bit vector, the autotuner broadcasts at
// the end of each sample, and an add/remove of a process set waits for every rank. Ranks
// that disagree made mismatched MPI calls (wrong sums, "Message truncated" aborts,
// SIGSEGV) or hung; now init() fails on every rank naming the setting and the ranks' values.
// MXHOROVOD_BLOCKING_DATA (MPI's blocking calls do not match the nonblocking ones: a hang)
// is agreed instead: blocking only when every rank would block, so a host with more ranks
// than cores next to one with fewer (its default) works too.
Status AgreeOnSettings(MPI_Comm comm, const Topology& topo, bool dynamic, Config* cfg) {
  struct Setting {
    const char* name;
    int64_t value;
  };
  const std::vector<Setting> mine = {
      {"HOROVOD_FUSION_THRESHOLD", cfg->fusion_threshold},
      {"HOROVOD_CACHE_CAPACITY", cfg->cache_capacity},
      {"MXHOROVOD_SLICE_BYTES", cfg->slice_bytes},
      {"MXHOROVOD_ZERO_COPY_BYTES", cfg->zero_copy_bytes},
      {"HOROVOD_AUTOTUNE", cfg->autotune ? 1 : 0},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", cfg->autotune ? cfg->autotune_warmup_samples : 0},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", cfg->autotune ? cfg->autotune_steps_per_sample : 0},
      {"HOROVOD_DYNAMIC_PROCESS_SETS (or init(process_sets=\"dynamic\"))", dynamic ? 1 : 0},
  };
  const size_t n = mine.size() + 1;
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  const int64_t blocking = cfg->blocking_data >= 0 ? cfg->blocking_data
                                                    : (cores > 0 && topo.local_size > cores ? 0 : 1);
  std::vector<int64_t> values(n), all(n * topo.size);
  for (size_t i = 0; i < mine.size(); ++i) values[i] = mine[i].value;
  values[mine.size()] = blocking;
  auto s = MPICheck(MPI_Allgather(values.data(), (int)n, MPI_INT64_T, all.data(), (int)n,
                                  MPI_INT64_T, comm),
                    "MPI_Allgather (settings)");
  if (!s.ok()) return s;
  std::string errors;
  for (size_t i = 0; i < mine.size(); ++i) {
    // Values in order of first appearance, each with its ranks.
    std::vector<int64_t> distinct;
    std::vector<std::vector<int>> ranks;
    for (int r = 0; r < topo.size; ++r) {
      int64_t v = all[r * n + i];
      size_t k = std::find(distinct.begin(), distinct.end(), v) - distinct.begin();
      if (k == distinct.size()) {
        distinct.push_back(v);
        ranks.emplace_back();
      }
      ranks[k].push_back(r);
    }
    if (distinct.size() == 1) continue;
    std::string text = std::string(errors.empty() ? "" : "; ") + mine[i].name + " differs between ranks:";
    for (size_t k = 0; k < distinct.size(); ++k) {
      text += std::string(k ? "," : "") + " " + std::to_string(distinct[k]) + " on ranks " + RankList(ranks[k]);
    }
    errors += text;
  }
  if (!errors.empty()) {
    return Status::InvalidArgument(errors + ". Set each the same way for every rank.");
  }
  int64_t agreed = 1;
  for (int r = 0; r < topo.size; ++r) agreed = std::min(agreed, all[r * n + mine.size()]);
  if (agreed != blocking) {
    LogDebug("MXHOROVOD_BLOCKING_DATA: nonblocking data calls, as another rank needs them");
  }
  cfg->blocking_data = (int)agreed;
  return Status::OK();
}

void FailEntries(std::vector<TensorTableEntry>&& entries, const std::string& why) {
  for (auto& e : entries) {
    e.callback(Status::Aborted(std::string(OpTypeName(e.request.op_type)) + " '" + e.request.name +
                               "' did not run: " + why));
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
  *fatal = set.controller->ComputeResponses(shutdown_requested, result);
  if (!fatal->ok()) return;
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
    if (missing) {
      s = Status::UnknownError("internal error: a negotiated tensor is not queued on this rank");
    } else {
      timeline.ActivityEndAll(entries);  // [timeline] QUEUE
      s = set.executor->Run(*ok[group[0]], entries);
    }
    for (int i : group) {
      if (found[i]) taken[i].callback(s);
      timeline.OpEnd(ok[i]->names[0]);  // [timeline]
    }
  }
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

struct StartArgs {
  int64_t comm_f2c;
  std::vector<int> ranks;
  std::vector<std::vector<int>> process_sets;
  Config cfg;
  std::string cfg_error;  // this rank's bad setting ("" if none): init() fails on every rank
};

void BackgroundLoop(StartArgs args) {
  // Named so that `top -H`, `ps -L`, perf and /proc/<pid>/task/*/comm show which thread is
  // ours (the communication) and which are the model's.
  pthread_setname_np(pthread_self(), "mxhorovod-bg");
  State& st = S();
  Config& cfg = args.cfg;
  MPI_Comm comm = MPI_COMM_NULL;
  Topology topo;
  HostComms hc;
  Status s = StartMPI(args.comm_f2c, args.ranks, cfg.hierarchical_allreduce, cfg,
                      args.cfg_error, &comm, &topo, &hc);
  if (s.ok()) s = AgreeOnSettings(comm, topo, st.dynamic_process_sets, &cfg);
  std::shared_ptr<ProcessSet> global;
  if (s.ok()) {
    ConfigureLogging(cfg.log, topo.rank);
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
    if (cfg.hierarchical_allreduce) global->UseHierarchical(hc.local, hc.cross, cfg);
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
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  if (cores > 0 && topo.local_size > cores) {
    // More ranks than cores: a waiting rank must give its core away almost at once.
    policy.spins = 4;
    policy.max_sleep_us = 1000;
    policy.blocking_data = false;
  }
  if (cfg.blocking_data >= 0) policy.blocking_data = cfg.blocking_data != 0;
  // Plus a cycle: a peer with nothing to do may sleep that long before negotiating.
  policy.warn_after_s = cfg.stall.enabled ? cfg.stall.check_s + cfg.cycle_time_ms / 1000 : 0;
  SetWaitPolicy(policy);
  LogDebug(std::string("doorbell: ") +
           (OpenDoorbell(comm, hc.local, cfg.doorbell)
                ? "every rank of the job can wake every other"
                : "not on every rank of the job (another host, MXHOROVOD_DOORBELL=0, no or a full "
                  "/dev/shm): waits sleep on timers where it is missing"));
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
  const std::chrono::duration<double, std::milli> kRetryWait(0.05);
  const std::chrono::duration<double, std::milli> kIdleWait(20.0);
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
      auto wait = idle ? std::max<std::chrono::duration<double, std::milli>>(cycle, kIdleWait) : cycle;
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
      if (wait.count() > 0) st.wake_cv.wait_until(lk, until, [&] { return st.wake.load(); });
      // Work enqueued before a later Wake is already queued: the next cycle sees it.
      st.wake = false;
    }
  }
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

// Waits (holding `lk` on S().mu) for the background thread's start-up. While that thread is
// blocked in MPI_Comm_create_group (init with a list of ranks, see StartMPI), says so every
// HOROVOD_STALL_CHECK_TIME_SECONDS (at least kInitWarnS), as WaitForPeersAtInit does for
// init() without a list. It keeps waiting: a listed rank may legitimately come late.
Status WaitForStart(std::unique_lock<std::mutex>& lk, const Config& cfg) {
  State& st = S();
  const auto start = std::chrono::steady_clock::now();
  const auto every = InitWarnInterval(cfg.stall);
  auto next = start + every;
  for (;;) {
    const auto wake = std::min<std::chrono::steady_clock::time_point>(
        next, std::chrono::steady_clock::now() + kExitLook);
    if (st.cv.wait_until(lk, wake, [&] { return st.started; })) return Status::OK();
    if (st.init_watch) {
      // MPI_Init_thread cannot be left, and a rank that exited before starting MPI leaves
      // it blocked forever: Hydra ends a job only when a rank that started MPI exits. (Once
      // MPI has started on every rank, a rank that exits without MPI_Finalize ends the
      // job, and one in MPI_Finalize, mpi4py's at exit, still runs: neither is seen here.)
      const int rank = st.init_waiting_rank, size = st.init_waiting_size;
      lk.unlock();
      const std::string gone = ExitedLocalRanks();
      lk.lock();
      if (!gone.empty() && !st.started) return Status::PreconditionError(ExitedAtInit(gone, rank, size));
    }
    if (std::chrono::steady_clock::now() < next) continue;
    next += every;
    if (!cfg.stall.enabled || st.init_waiting_for.empty()) continue;
    const auto waited = std::chrono::steady_clock::now() - start;
    std::string who = st.init_waiting_rank >= 0 ? "rank " + std::to_string(st.init_waiting_rank) : "this rank";
    if (st.init_waiting_rank >= 0 && st.init_waiting_size > 0) who += " of " + std::to_string(st.init_waiting_size);
    LogWarning("init(): " + who + " has waited " +
               std::to_string((long)std::chrono::duration<double>(waited).count()) + " s for " +
               st.init_waiting_for);
  }
}
}  // namespace

Status Initialize(int64_t comm_f2c, const std::vector<int>& ranks,
                  const std::vector<std::vector<int>>& process_sets, bool dynamic_process_sets) {
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
  st.thread = std::thread(BackgroundLoop, StartArgs{comm_f2c, ranks, process_sets, cfg, cfg_error});
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
