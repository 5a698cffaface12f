#include "mpi_wait.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "common/job_abort.h"
#include "common/logging.h"
#include "ops/link_pace.h"
#include "ops/peer_watch.h"

namespace mxhorovod {
namespace {

// The doorbell of one host, in a page of /dev/shm mapped by each of its ranks: `seq` is the
// futex word (every ring adds one), `sleepers` counts the ranks in FUTEX_WAIT so that a ring
// with nobody asleep costs no system call. Lock-free atomics are address-free, so they work
// between processes (C++ [atomics.lockfree]).
struct Bell {
  std::atomic<uint32_t> seq;
  std::atomic<uint32_t> sleepers;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "the doorbell needs lock-free atomics");
constexpr size_t kBellBytes = 4096;
constexpr int kWakeSpins = 8;  // test + yield rounds after being rung, before sleeping again
// Sleep cap of a kSmall wait for a late peer (SetPeerLate) until the first ring: the late
// peer's background thread rings when it joins (an idle one cycles every 20-320 ms).
constexpr long kLatePeerSleepUs = 20000;
constexpr int kRingBacks = 2;  // rings after a test that follows a wake (a handshake's next
                               // step); more would let two ranks waiting for a third wake
                               // each other in turn

WaitPolicy g_policy;
thread_local bool t_peer_late = false;
thread_local std::string t_collective;  // SetCurrentCollective
Bell* g_bell = nullptr;
bool g_bell_everywhere = false;

void FutexWait(std::atomic<uint32_t>* word, uint32_t seen, long us) {
  timespec ts{us / 1000000, (us % 1000000) * 1000};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, seen, &ts, nullptr, 0);
}

// Rings: wakes every rank of this host asleep on the bell. Returns seq before the ring.
uint32_t Ring(Bell* bell) {
  uint32_t before = bell->seq.fetch_add(1);
  if (bell->sleepers.load() > 0) {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&bell->seq), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
  }
  return before;
}

// Warns when one wait has lasted longer than the policy's warn_after_s (and again every
// such time), then once when it ends. Checked in the sleeping rounds only.
class SlowWaitReport {
 public:
  using Clock = std::chrono::steady_clock;
  SlowWaitReport(const char* what, double after_s) : what_(what), every_s_(after_s) {}
  ~SlowWaitReport() {
    if (warned_) {
      LogWarning("this rank's " + std::string(what_) + " completed after " + Secs(Elapsed()) +
                 " s: every rank answers again");
    }
  }
  void Check() {
    if (every_s_ <= 0) return;
    if (!started_) {
      start_ = Clock::now();
      started_ = true;
      next_s_ = every_s_;
      return;
    }
    double waited = Elapsed();
    if (waited < next_s_) return;
    next_s_ = waited + every_s_;
    warned_ = true;
    LogWarning("this rank has waited " + Secs(waited) + " s in " + what_ + " for the other ranks' "
               "background threads, without an answer: some rank's process is not running "
               "(stopped by SIGSTOP or Ctrl-Z, held in a debugger, swapped out, or on a host "
               "that stopped answering); the ranks that print no such line are the suspects; "
               "still waiting");
  }

 private:
  double Elapsed() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  static std::string Secs(double s) { return std::to_string((long long)(s + 0.5)); }
  const char* what_;
  double every_s_;
  bool started_ = false;
  bool warned_ = false;
  double next_s_ = 0;
  Clock::time_point start_;
};

// Ends the job when a rank of this host has ended while this wait lasts (peer_watch.h): the
// launcher should have, and did not (a child of that rank may hold its connection), so no
// rank would ever go on. Looked at once a second from the first second on, in the sleeping
// rounds; a peer seen ended at two looks in a row (the request may still complete from
// what the peer sent before it ended) ends this rank with MPI_Abort, which ends the job.
class EndedPeerCheck {
 public:
  using Clock = std::chrono::steady_clock;
  explicit EndedPeerCheck(const char* what) : what_(what) {}
  void Check() {
    const Clock::time_point now = Clock::now();
    if (!started_) {
      started_ = true;
      next_ = now + kEvery;
      return;
    }
    if (now < next_) return;
    next_ = now + kEvery;
    std::vector<int64_t> groups;
    const std::string ended = EndedLocalPeers(&groups);
    const bool again = !ended.empty() && ended == seen_;
    seen_ = ended;
    if (!again) return;
    // What the dead rank forked holds its output pipes: mpirun would wait for it after the
    // abort, as it waited for the dead rank. Killed at once after the look (the log line
    // below may block on a full pipe).
    for (int64_t g : groups) kill(-(pid_t)g, SIGKILL);
    LogError(ended + " has ended while this rank waited for it in " + what_ +
             " (its process is gone or a zombie), and the launcher did not end the job (a process "
             "that rank forked, still running, may hold its connection to the launcher): no "
             "rank can go on; ending the job (MPI_Abort)" +
             (groups.empty() ? "" : " and what that rank forked (SIGKILL to its process group, "
                                    "as mpirun's cleanup does)"));
    AbortJob(1);
    _exit(1);  // MPI was not running: nothing else would end this process
  }

 private:
  static constexpr std::chrono::seconds kEvery{1};
  const char* what_;
  bool started_ = false;
  Clock::time_point next_;
  std::string seen_;  // what the previous look found ended
};

}  // namespace

void SetWaitPolicy(const WaitPolicy& p) { g_policy = p; }
void SetCurrentCollective(const std::string& what) { t_collective = what; }

double TransferBoundSeconds(int64_t bytes) {
  if (g_policy.transfer_base_s <= 0) return 0;
  const double rate = g_policy.transfer_min_mbits * 1e6 / 8;  // bytes per second
  return g_policy.transfer_base_s + (rate > 0 ? (double)bytes / rate : 0);
}
void SetPeerLate(bool late) { t_peer_late = late; }
const WaitPolicy& GetWaitPolicy() { return g_policy; }

std::string MPIErrorString(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

Status CheckMPI(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string("MPI error in ") + what + ": " + MPIErrorString(rc));
}

namespace {

constexpr char kBellDir[] = "/dev/shm";
constexpr char kBellPrefix[] = "mxhorovod-bell-";
// A bell file lives for the few collectives of OpenDoorbell; one older than this whose
// creator is gone was left by a job killed inside that window.
constexpr time_t kStaleBellSeconds = 60;

// Removes the bell files of dead jobs: the name carries its creator's pid
// ("mxhorovod-bell-<pid>-XXXXXX"), and a file is removed only when that pid no longer
// exists (kill(pid, 0) gives ESRCH), the file is older than kStaleBellSeconds, and it is
// this user's (a regular file, not a link). A live
// job whose pid is not visible here (another pid namespace sharing /dev/shm) loses at most
// its doorbell: its ranks that cannot open the file go without one, as on a full /dev/shm.
void RemoveStaleBells() {
  DIR* dir = opendir(kBellDir);
  if (!dir) return;
  const time_t now = time(nullptr);
  const size_t prefix_len = sizeof(kBellPrefix) - 1;
  while (struct dirent* e = readdir(dir)) {
    if (std::strncmp(e->d_name, kBellPrefix, prefix_len) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(e->d_name + prefix_len, &end, 10);
    if (pid <= 0 || end == e->d_name + prefix_len || *end != '-') continue;  // not ours
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;   // alive
    std::string path = std::string(kBellDir) + "/" + e->d_name;
    struct stat st;  // another user's file is theirs to remove (root too leaves it)
    if (lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        now - st.st_mtime < kStaleBellSeconds) continue;
    if (unlink(path.c_str()) == 0)
      LogDebug("removed " + path + ", a doorbell file left by the dead process " + std::to_string(pid));
  }
  closedir(dir);
}

}  // namespace

bool OpenDoorbell(MPI_Comm comm, MPI_Comm local, bool enabled) {
  CloseDoorbell();
  int local_rank = 0, local_size = 1, size = 1;
  MPI_Comm_rank(local, &local_rank);
  MPI_Comm_size(local, &local_size);
  MPI_Comm_size(comm, &size);
  // Local rank 0 makes the file and names it to the others; it is unlinked once all have
  // mapped it (the mappings outlive the name). A job killed before that leaves it behind;
  // the next job on the host removes it (RemoveStaleBells).
  char path[64] = {0};
  int fd = -1;
  if (local_rank == 0 && enabled) {
    RemoveStaleBells();
    std::snprintf(path, sizeof(path), "%s/%s%ld-XXXXXX", kBellDir, kBellPrefix,
                  static_cast<long>(getpid()));
    fd = mkstemp(path);
    // posix_fallocate, not ftruncate: on a full /dev/shm ftruncate still makes a sparse
    // file, and the first touch of its page killed every rank with SIGBUS. A file that
    // cannot have its page is removed again (the ranks go without a doorbell).
    if (fd >= 0 && posix_fallocate(fd, 0, kBellBytes) != 0) {
      unlink(path);
      close(fd);
      fd = -1;
    }
    if (fd < 0) path[0] = 0;
  }
  MPI_Bcast(path, sizeof(path), MPI_CHAR, 0, local);
  if (local_rank != 0 && path[0]) fd = open(path, O_RDWR);
  void* p = MAP_FAILED;
  if (fd >= 0 && path[0]) p = mmap(nullptr, kBellBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (fd >= 0) close(fd);
  int ok = enabled && p != MAP_FAILED, all_ok = 0;
  MPI_Allreduce(&ok, &all_ok, 1, MPI_INT, MPI_MIN, local);  // also: everyone has mapped it
  if (local_rank == 0 && path[0]) unlink(path);
  if (!all_ok) {
    if (p != MAP_FAILED) munmap(p, kBellBytes);
    p = MAP_FAILED;
  }
  int everywhere = all_ok && local_size == size, all_everywhere = 0;
  MPI_Allreduce(&everywhere, &all_everywhere, 1, MPI_INT, MPI_MIN, comm);
  g_bell = p == MAP_FAILED ? nullptr : static_cast<Bell*>(p);  // a fresh file reads as zeros
  g_bell_everywhere = g_bell && all_everywhere;
  return g_bell_everywhere;
}

bool DoorbellEverywhere() { return g_bell_everywhere; }

void CloseDoorbell() {
  if (g_bell) munmap(g_bell, kBellBytes);
  g_bell = nullptr;
  g_bell_everywhere = false;
}

namespace {

std::string Fixed1(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", v);
  return buf;
}

// Ends the job: a wait between hosts has lasted `waited` s, past its bound. The text is
// stable (the elastic launcher and users search for it): see docs.
[[noreturn]] void TransferTimedOut(const char* what, const LinkWait& link, double waited, double bound) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  int rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  LogError("transfer between hosts timed out: " +
           (t_collective.empty() ? std::string("negotiation") : t_collective) + " has waited " +
           Fixed1(waited) + " s in " + what + " for host " + link.peers + " (" +
           std::to_string(link.bytes) + " bytes over the link of host " + host +
           "), past its bound of " + Fixed1(bound) + " s (MXHOROVOD_TRANSFER_TIMEOUT_SECONDS=" +
           Fixed1(g_policy.transfer_base_s) + " plus the bytes at MXHOROVOD_TRANSFER_MIN_MBITS=" +
           Fixed1(g_policy.transfer_min_mbits) + "): the network between " + host + " and " +
           link.peers + " is down or slower than that, or a rank there stopped; MPI cannot "
           "cancel a transfer, so rank " + std::to_string(rank) + " ends the job (MPI_Abort)");
  AbortJob(1);
  _exit(1);  // MPI was not running: nothing else would end this process
}

// The thread's timer slack, lowered by Lower() until this ends: nanosleep ends up to the
// slack past its pause (50 us by default for a thread of normal priority), which doubled
// a link wait's 50 us pause.
class TimerSlack {
 public:
  void Lower(unsigned long ns) {
    if (old_ != 0) return;
    old_ = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
    if (old_ > 0 && (unsigned long)old_ > ns) prctl(PR_SET_TIMERSLACK, ns, 0, 0, 0);
  }
  ~TimerSlack() {
    if (old_ > 0) prctl(PR_SET_TIMERSLACK, (unsigned long)old_, 0, 0, 0);
  }

 private:
  long old_ = 0;  // 0: not lowered
};

// A data call between hosts (LinkWait): tests back to back for data_busy_us, then sleeps
// between tests where link.pause (LinkPauseUs: MXHOROVOD_LINK_SLEEP_US if set, else sized
// from the link's rate; 0 or no pause: yields the core between tests). Past the bound,
// ends the job. The doorbell is rung as in WaitRequest (the ranks of this host in the same
// call may be asleep on it).
Status WaitLink(MPI_Request* req, const char* what, const LinkWait& link) {
  using Clock = std::chrono::steady_clock;
  Bell* bell = g_bell;
  const Clock::time_point start = Clock::now();
  const double bound = TransferBoundSeconds(link.bytes);
  const Clock::time_point busy_until = start + std::chrono::microseconds(g_policy.data_busy_us);
  const long pause_us = link.pause ? LinkPauseUs() : 0;
  SlowWaitReport slow(what, g_policy.warn_after_s);
  EndedPeerCheck ended(what);
  bool ring = true;
  bool busy = true;
  TimerSlack slack;  // lowered while this wait sleeps
  for (long round = 0;; ++round) {
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (bell && (ring || done)) Ring(bell);
    ring = false;
    if (rc != MPI_SUCCESS || done) return CheckMPI(rc, what);
    if (busy) {
      if ((round & 15) != 15) continue;
      busy = Clock::now() < busy_until;
      continue;
    }
    if (pause_us > 0) {
      slack.Lower(1000);
      timespec ts{0, pause_us * 1000};
      nanosleep(&ts, nullptr);
    } else if ((round & 255) != 255) {
      sched_yield();
      continue;
    }
    // Every pause, or about every 256 yields (well under a millisecond): the clocks.
    slow.Check();
    ended.Check();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (bound <= 0 || waited <= bound) {
      if (pause_us <= 0) sched_yield();
      continue;
    }
    TransferTimedOut(what, link, waited, bound);
  }
}

}  // namespace

// A data wait first tests back to back for data_busy_us (no yield: a peer on time completes
// within it). Then rounds [0, spin_until) test and yield; later rounds test and sleep, on
// the doorbell when there is one (a ring ends the sleep) or on a timer, the pause doubling
// from 10 us to the cap. The first test (our part of the collective is under way: MPI_Test
// progressed its first step) and the completing one ring the bell, so peers waiting for
// them wake.
Status WaitRequest(MPI_Request* req, const char* what, WaitFor kind, const LinkWait* link) {
  if (link && kind == WaitFor::kData) return WaitLink(req, what, *link);
  Bell* bell = g_bell;
  const long cap = kind == WaitFor::kSmall && g_bell_everywhere
                       ? std::max(g_policy.bell_sleep_us, g_policy.max_sleep_us)
                       : g_policy.max_sleep_us;
  // Waiting for a late peer: no spinning, and the long cap until some rank rings.
  bool late = kind == WaitFor::kSmall && g_bell_everywhere && t_peer_late;
  if (kind == WaitFor::kSmall) t_peer_late = false;  // the negotiation's first wait only
  int spin_until = late ? 0 : g_policy.spins;
  int ring_backs = kRingBacks;
  bool ring = true;
  long sleep_us = late ? cap : 10;
  if (kind == WaitFor::kData && g_policy.data_busy_us > 0) {
    const auto until = std::chrono::steady_clock::now() +
                       std::chrono::microseconds(g_policy.data_busy_us);
    do {
      int done = 0;
      int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
      if (bell && (ring || done)) Ring(bell);
      ring = false;
      if (rc != MPI_SUCCESS || done) return CheckMPI(rc, what);
    } while (std::chrono::steady_clock::now() < until);
  }
  SlowWaitReport slow(what, g_policy.warn_after_s);
  EndedPeerCheck ended(what);
  // A negotiation between hosts (kSmall with `link`): bounded, checked in the sleeping rounds.
  const double bound = link ? TransferBoundSeconds(link->bytes) : 0;
  const auto started = std::chrono::steady_clock::now();
  for (int round = 0;; ++round) {
    const bool sleeper = bell && round >= spin_until;
    uint32_t seen = 0;
    if (sleeper) {
      bell->sleepers.fetch_add(1);
      seen = bell->seq.load();
    }
    int done = 0;
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (bell && (ring || done)) {
      // Our own ring must not end our sleep; a peer's ring since `seen` must.
      if (Ring(bell) == seen && sleeper) ++seen;
    }
    ring = false;
    if (rc != MPI_SUCCESS || done) {
      if (sleeper) bell->sleepers.fetch_sub(1);
      return CheckMPI(rc, what);
    }
    if (round < spin_until) {
      sched_yield();
      continue;
    }
    slow.Check();
    ended.Check();
    if (bound > 0) {
      const double waited =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
      if (waited > bound) TransferTimedOut(what, *link, waited, bound);
    }
    if (!bell) {
      timespec ts{0, sleep_us * 1000};
      nanosleep(&ts, nullptr);
      sleep_us = std::min<long>(sleep_us * 2, cap);
      continue;
    }
    FutexWait(&bell->seq, seen, sleep_us);
    bell->sleepers.fetch_sub(1);
    if (bell->seq.load() != seen) {  // rung: a peer moved; look again at once, briefly
      late = false;
      spin_until = round + 1 + kWakeSpins;
      sleep_us = 10;
      if (ring_backs > 0) {
        --ring_backs;
        ring = true;
      }
    } else {
      sleep_us = std::min<long>(sleep_us * 2, late ? std::max(cap, kLatePeerSleepUs) : cap);
    }
  }
}

}  // namespace mxhorovod
