#include "ops/peer_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "common/job_abort.h"
#include "common/logging.h"

namespace mxhorovod {
namespace {

struct Peer {
  int64_t rank;        // in the job
  int64_t pid;
  int64_t start_time;  // /proc/PID/stat field 22; -1 where unreadable
  int64_t leader;      // 1: it leads its process group (pgid == pid), as under Hydra
  uint64_t pid_ns;     // inode of /proc/self/ns/pid: peers in another namespace are not watched
};

std::mutex g_mu;
std::vector<Peer> g_watched;

enum class Look { kRuns, kEnded, kUnknown };

// Process `pid` as /proc shows it: its state letter and start time. kEnded only when the
// kernel says there is no such process (ESRCH, ENOENT); kUnknown when /proc could not be
// read for another reason (no descriptor left: EMFILE, ENFILE, ENOMEM), which must never
// count as an ended peer.
Look ReadProc(int64_t pid, char* state, int64_t* start_time) {
  const std::string path = "/proc/" + std::to_string(pid) + "/stat";
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT && errno != ESRCH) return Look::kUnknown;
    return kill((pid_t)pid, 0) == -1 && errno == ESRCH ? Look::kEnded : Look::kUnknown;
  }
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  const int read_errno = errno;
  close(fd);
  if (n <= 0) return n < 0 && read_errno == ESRCH ? Look::kEnded : Look::kUnknown;
  buf[n] = 0;
  // The command name (field 2, in parentheses) may hold spaces, ')' and newlines.
  const char* p = std::strrchr(buf, ')');
  if (!p) return Look::kUnknown;
  ++p;
  *start_time = -1;
  for (int field = 3; *p; ++field) {  // fields are numbered from 1; the state is 3
    while (*p == ' ') ++p;
    if (!*p) break;
    if (field == 3) *state = *p;
    if (field == 22) {
      *start_time = std::strtoll(p, nullptr, 10);
      break;
    }
    while (*p && *p != ' ') ++p;
  }
  return *start_time >= 0 ? Look::kRuns : Look::kUnknown;
}

// The blocking call in progress (BlockingCallMark) and the watch's thread.
std::atomic<const char*> g_blocked_what{nullptr};
std::atomic<uint64_t> g_blocked_seq{0};
std::atomic<int64_t> g_blocked_since_ns{0};
std::mutex g_thread_mu;
std::condition_variable g_thread_cv;
bool g_thread_stop = false;
std::thread* g_thread = nullptr;  // never a static std::thread: a forked child inherits none

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

void WatchBlockingCalls() {
  std::string seen;
  uint64_t seen_seq = 0;
  std::unique_lock<std::mutex> lk(g_thread_mu);
  while (!g_thread_cv.wait_for(lk, std::chrono::seconds(1), [] { return g_thread_stop; })) {
    const uint64_t seq = g_blocked_seq.load();
    const char* what = g_blocked_what.load();
    if (!what || NowNs() - g_blocked_since_ns.load() < 1000000000LL) {
      seen.clear();
      continue;
    }
    std::vector<int64_t> groups;
    const std::string ended = EndedLocalPeers(&groups);
    const bool again = !ended.empty() && ended == seen && seq == seen_seq &&
                       g_blocked_seq.load() == seq && g_blocked_what.load() == what;
    seen = ended;
    seen_seq = seq;
    if (again) EndJobForEndedPeers(ended, groups, what);
  }
}

uint64_t PidNamespace() {
  struct stat st;
  return stat("/proc/self/ns/pid", &st) == 0 ? (uint64_t)st.st_ino : 0;
}

}  // namespace

void WatchLocalPeers(MPI_Comm local, int job_rank) {
  char state = 0;
  Peer mine{job_rank, (int64_t)getpid(), -1, getpgid(0) == getpid() ? 1 : 0, PidNamespace()};
  if (ReadProc(mine.pid, &state, &mine.start_time) != Look::kRuns) mine.start_time = -1;
  int size = 1, me = 0;
  MPI_Comm_size(local, &size);
  MPI_Comm_rank(local, &me);
  std::vector<Peer> all(size);
  MPI_Allgather(&mine, sizeof(Peer), MPI_BYTE, all.data(), sizeof(Peer), MPI_BYTE, local);
  std::vector<Peer> watched;
  for (int q = 0; q < size; ++q) {
    int64_t start = -1;
    if (q == me || all[q].start_time < 0 || all[q].pid <= 1 || all[q].pid_ns != mine.pid_ns ||
        mine.pid_ns == 0) {
      continue;
    }
    if (ReadProc(all[q].pid, &state, &start) == Look::kRuns && start == all[q].start_time) {
      watched.push_back(all[q]);
    }
  }
  const bool any = !watched.empty();
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_watched = std::move(watched);
  }
  if (any && !g_thread) {
    g_thread_stop = false;
    g_thread = new std::thread(WatchBlockingCalls);
  }
}

void StopWatchingPeers() {
  {
    std::lock_guard<std::mutex> lk(g_mu);
    g_watched.clear();
  }
  if (!g_thread) return;
  {
    std::lock_guard<std::mutex> lk(g_thread_mu);
    g_thread_stop = true;
  }
  g_thread_cv.notify_all();
  g_thread->join();
  delete g_thread;
  g_thread = nullptr;
}

void EndJobForEndedPeers(const std::string& ended, const std::vector<int64_t>& groups,
                         const char* what) {
  for (int64_t g : groups) kill(-(pid_t)g, SIGKILL);  // before the log line, which may block
  LogError(ended + " has ended while this rank waited for it in " + what +
           " (its process is gone or a zombie), and the launcher did not end the job (a process "
           "that rank forked, still running, may hold its connection to the launcher): no "
           "rank can go on; ending the job (MPI_Abort)" +
           (groups.empty() ? "" : " and what that rank forked (SIGKILL to its process group, "
                                  "as mpirun's cleanup does)"));
  AbortJob(1);
  _exit(1);  // MPI was not running: nothing else would end this process
}

BlockingCallMark::BlockingCallMark(const char* what) {
  g_blocked_since_ns.store(NowNs());
  g_blocked_seq.fetch_add(1);
  g_blocked_what.store(what);
}

BlockingCallMark::~BlockingCallMark() { g_blocked_what.store(nullptr); }

std::string EndedLocalPeers(std::vector<int64_t>* groups) {
  std::lock_guard<std::mutex> lk(g_mu);
  if (groups) groups->clear();
  std::string ranks, pids;
  int n = 0;
  const pid_t own_group = getpgrp();
  for (const Peer& p : g_watched) {
    char state = 0;
    int64_t start = -1;
    const Look look = ReadProc(p.pid, &state, &start);
    if (look == Look::kUnknown) continue;
    const bool same = look == Look::kRuns && start == p.start_time;
    if (same && state != 'Z' && state != 'X') continue;
    // Not when another process has taken the pid (it may lead a group of its own), nor
    // this process's own group.
    if (groups && p.leader && (look == Look::kEnded || same) && p.pid != own_group) {
      groups->push_back(p.pid);
    }
    ranks += (n ? ", " : "") + std::to_string(p.rank);
    pids += (n ? ", " : "") + std::to_string(p.pid);
    ++n;
  }
  if (n == 0) return "";
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return (n == 1 ? "rank " : "ranks ") + ranks + (n == 1 ? " (pid " : " (pids ") + pids + " on " +
         host + ")";
}

}  // namespace mxhorovod
