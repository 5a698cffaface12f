#include "ops/peer_watch.h"

#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

namespace mxhorovod {
namespace {

struct Peer {
  int64_t rank;        // in the job
  int64_t pid;
  int64_t start_time;  // /proc/PID/stat field 22; -1 where unreadable
  int64_t leader;      // 1: it leads its process group (pgid == pid), as under Hydra
};

std::mutex g_mu;
std::vector<Peer> g_watched;

// The state letter and start time of process `pid`; false when it has no /proc entry.
bool ReadProc(int64_t pid, char* state, int64_t* start_time) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t close = line.rfind(')');  // the command name may hold spaces and ')'
  if (close == std::string::npos) return false;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  *start_time = -1;
  for (int i = 3; rest >> field; ++i) {  // fields are numbered from 1; the state is 3
    if (i == 3) *state = field.empty() ? '?' : field[0];
    if (i == 22) {
      *start_time = std::stoll(field);
      break;
    }
  }
  return *start_time >= 0;
}

}  // namespace

void WatchLocalPeers(MPI_Comm local, int job_rank) {
  char state = 0;
  Peer mine{job_rank, (int64_t)getpid(), -1, getpgid(0) == getpid() ? 1 : 0};
  ReadProc(mine.pid, &state, &mine.start_time);
  int size = 1, me = 0;
  MPI_Comm_size(local, &size);
  MPI_Comm_rank(local, &me);
  std::vector<Peer> all(size);
  MPI_Allgather(&mine, sizeof(Peer), MPI_BYTE, all.data(), sizeof(Peer), MPI_BYTE, local);
  std::vector<Peer> watched;
  for (int q = 0; q < size; ++q) {
    int64_t start = -1;
    if (q == me || all[q].start_time < 0) continue;
    if (ReadProc(all[q].pid, &state, &start) && start == all[q].start_time) watched.push_back(all[q]);
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
  for (const Peer& p : g_watched) {
    char state = 0;
    int64_t start = -1;
    const bool listed = ReadProc(p.pid, &state, &start);
    const bool same = listed && start == p.start_time;
    if (same && state != 'Z' && state != 'X') continue;
    // Not when another process has taken the pid: it may lead a group of its own.
    if (groups && p.leader && (!listed || same)) groups->push_back(p.pid);
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
