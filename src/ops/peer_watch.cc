#include "ops/peer_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

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
  std::lock_guard<std::mutex> lk(g_mu);
  g_watched = std::move(watched);
}

void StopWatchingPeers() {
  std::lock_guard<std::mutex> lk(g_mu);
  g_watched.clear();
}

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
