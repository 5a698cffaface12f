#include "startup.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "launcher_check.h"
#include "logging.h"
#include "ops/mpi_hierarchical.h"
#include "ops/mpi_wait.h"
#include "setting_errors.h"
#include "state.h"

namespace mxhorovod {

Status MPICheck(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string(what) + " failed: " + MPIErrorString(rc));
}

// Frees communicators that are not null (unless MPI is finalized).
void FreeComms(std::initializer_list<MPI_Comm*> comms) {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (MPI_Comm* c : comms) {
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
  }
}

namespace {

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
  return "init(): " + gone + " without completing hvd.init(), while " + who +
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

}  // namespace

Status StartMPI(int64_t comm_f2c, const std::vector<int>& ranks, int* hierarchical,
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
  if (*hierarchical < 0) {
    // Unset: by topology, the same on every rank (the largest host and the host count).
    int mine[2] = {topo->local_size, topo->cross_size}, most[2] = {0, 0};
    s = MPICheck(MPI_Allreduce(mine, most, 2, MPI_INT, MPI_MAX, *comm), "MPI_Allreduce (topology)");
    if (!s.ok()) return s;
    // Several hosts and several ranks on one (only the local roots send between hosts), or
    // more than 2 hosts (the ring between hosts of the hierarchical allreduce sends the
    // least; MPICH's allreduce for 3 ranks sent twice the payload from one host).
    *hierarchical = most[1] > 1 && (most[0] > 1 || most[1] > 2) ? 1 : 0;
    if (*hierarchical) {
      LogDebug("hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE unset): " +
               std::to_string(most[1]) + " hosts, up to " + std::to_string(most[0]) +
               " ranks on one");
    }
  }
  return AgreeOnHierarchical(*comm, *hierarchical > 0);
}

// The settings that decide which MPI calls a cycle makes must be the same on every rank:
// the fusion threshold, the zero-copy size and the slice size group and split the data
// calls, the cache capacity sizes the negotiation's bit vector, the autotuner broadcasts at
// the end of each sample, and an add/remove of a process set waits for every rank. Ranks
// that disagree made mismatched MPI calls (wrong sums, "Message truncated" aborts,
// SIGSEGV) or hung; now init() fails on every rank naming the setting and the ranks' values.
// MXHOROVOD_BLOCKING_DATA (MPI's blocking calls do not match the nonblocking ones: a hang)
// is agreed instead: blocking only when every rank asks for it (the default is not to).
Status AgreeOnSettings(MPI_Comm comm, const Topology& topo, bool dynamic, Config* cfg) {
  struct Setting {
    const char* name;
    int64_t value;
  };
  const std::vector<Setting> mine = {
      {"HOROVOD_FUSION_THRESHOLD", cfg->fusion_threshold},
      {"HOROVOD_CACHE_CAPACITY", cfg->cache_capacity},
      {"MXHOROVOD_SLICE_BYTES", cfg->slice_bytes},
      {"MXHOROVOD_LINK_SLICE_BYTES", cfg->link_slice_bytes},
      {"MXHOROVOD_ZERO_COPY_BYTES", cfg->zero_copy_bytes},
      {"HOROVOD_AUTOTUNE", cfg->autotune ? 1 : 0},
      {"HOROVOD_AUTOTUNE_WARMUP_SAMPLES", cfg->autotune ? cfg->autotune_warmup_samples : 0},
      {"HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE", cfg->autotune ? cfg->autotune_steps_per_sample : 0},
      {"HOROVOD_DYNAMIC_PROCESS_SETS (or init(process_sets=\"dynamic\"))", dynamic ? 1 : 0},
  };
  const size_t n = mine.size() + 1;
  const int64_t blocking = cfg->blocking_data >= 0 ? cfg->blocking_data : 0;
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
    Log(LogLevel::kInfo, "MXHOROVOD_BLOCKING_DATA=1 on this rank, not on every rank: the "
                         "data calls are nonblocking (they must match on every rank)");
  }
  cfg->blocking_data = (int)agreed;
  return Status::OK();
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

}  // namespace mxhorovod
