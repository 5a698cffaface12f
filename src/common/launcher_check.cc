#include "launcher_check.h"

#include "stall_inspector.h"  // RankList

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace mxhorovod {

Status CheckLauncherConnection() {
  const char* v = std::getenv("PMI_FD");
  if (!v || !*v) return Status::OK();
  char* end = nullptr;
  errno = 0;
  long fd = std::strtol(v, &end, 10);
  if (errno || *end || fd < 0 || fd > 1 << 20) return Status::OK();  // not Hydra's: MPI judges
  struct stat st;
  std::string why;
  if (fstat((int)fd, &st) != 0) {
    why = std::string("is not open in this process (") + std::strerror(errno) + ")";
  } else if (!S_ISSOCK(st.st_mode)) {
    why = "is open in this process, but not as a socket";
  } else {
    return Status::OK();
  }
  return Status::PreconditionError(
      std::string("hvd.init(): PMI_FD=") + v + ", the connection mpirun gives each process it "
      "starts, " + why + ": this process (pid " + std::to_string(getpid()) + ", parent " +
      std::to_string(getppid()) + ") was not started by mpirun but by a rank (multiprocessing "
      "with 'spawn' or 'forkserver', or a subprocess), and cannot join the job. Call hvd.init() "
      "in the processes mpirun starts only (in a script that multiprocessing imports again, "
      "under `if __name__ == \"__main__\":`)");
}

namespace {
// The pid of the process of this fork family that started MPI on the launcher's connection
// (0: none yet), in a page shared with every process forked from this one after the module
// was loaded (MAP_SHARED survives fork; exec and a fresh interpreter start their own).
std::atomic<int32_t>* LauncherClaim() {
  static std::atomic<int32_t>* const claim = [] {
    void* p = mmap(nullptr, sizeof(std::atomic<int32_t>), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? nullptr : new (p) std::atomic<int32_t>(0);
  }();
  return claim;
}
// Made at load (import), before the script can fork.
const bool kClaimMade = LauncherClaim() != nullptr;
}  // namespace

Status ClaimLauncherConnection() {
  const char* v = std::getenv("PMI_FD");
  std::atomic<int32_t>* claim = LauncherClaim();
  if (!v || !*v || !claim) return Status::OK();
  int32_t owner = 0;
  const int32_t me = (int32_t)getpid();
  if (claim->compare_exchange_strong(owner, me) || owner == me) return Status::OK();
  const bool alive = kill(owner, 0) == 0 || errno == EPERM;
  return Status::PreconditionError(
      "hvd.init(): this rank's connection to mpirun (PMI_FD=" + std::string(v) + ") was " +
      "already used to start MPI by process " + std::to_string(owner) + (alive ? "" : " (since exited)") +
      ", and this process (pid " + std::to_string(me) + ", parent " + std::to_string(getppid()) +
      ") shares it: one of them was forked from the other before hvd.init() (os.fork(), "
      "multiprocessing with 'fork', a DataLoader worker). MPI can start once per rank (a second "
      "start on the same connection ended the job in MPI_Init_thread): call hvd.init() in one "
      "process per rank, before forking or in the forked process only");
}

namespace {
int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  errno = 0;
  long n = std::strtol(v, &end, 10);
  if (errno || *end || n < 0 || n > (1L << 30)) return -1;
  return (int)n;
}
}  // namespace

void LauncherRankAndSize(int* rank, int* size) {
  *rank = EnvInt("PMI_RANK");
  *size = EnvInt("PMI_SIZE");
  if (*rank < 0) {
    *rank = EnvInt("OMPI_COMM_WORLD_RANK");
    *size = EnvInt("OMPI_COMM_WORLD_SIZE");
  }
  if (*rank < 0) *rank = EnvInt("PMIX_RANK");
  if (*rank < 0 || (*size >= 0 && *rank >= *size)) *size = -1;
}


namespace {
// /proc/PID/stat: the command name, the state letter and the parent's pid.
bool ReadStat(long pid, std::string* comm, char* state, long* ppid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return false;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  *comm = line.substr(open + 1, close - open - 1);
  std::istringstream rest(line.substr(close + 1));
  return static_cast<bool>(rest >> *state >> *ppid);
}

// A variable of another process's environment (-1: absent, unreadable or not a number).
long EnvOf(long pid, const std::string& name) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  std::string kv;
  const std::string key = name + "=";
  while (std::getline(f, kv, '\0')) {
    if (kv.compare(0, key.size(), key) != 0) continue;
    char* end = nullptr;
    errno = 0;
    long n = std::strtol(kv.c_str() + key.size(), &end, 10);
    return (errno || *end || n < 0) ? -1 : n;
  }
  return -1;
}
}  // namespace

std::string ExitedLocalRanks() {
  const int local_n = EnvInt("MPI_LOCALNRANKS"), size = EnvInt("PMI_SIZE");
  if (local_n <= 1 || size < local_n) return "";
  // The proxy: the nearest ancestor named hydra_pmi_proxy (a few levels at most).
  long pid = getppid(), proxy = -1;
  for (int depth = 0; depth < 6 && pid > 1; ++depth) {
    std::string comm;
    char state = 0;
    long ppid = 0;
    if (!ReadStat(pid, &comm, &state, &ppid)) return "";
    if (comm == "hydra_pmi_proxy") {
      proxy = pid;
      break;
    }
    pid = ppid;
  }
  if (proxy < 0) return "";
  // Its children, over all its threads (the file lists one thread's children).
  const std::string task_dir = "/proc/" + std::to_string(proxy) + "/task";
  DIR* dir = opendir(task_dir.c_str());
  if (!dir) return "";
  std::vector<long> children;
  bool readable = false;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream f(task_dir + "/" + e->d_name + "/children");
    if (!f) continue;
    readable = true;
    long c;
    while (f >> c) children.push_back(c);
  }
  closedir(dir);
  if (!readable) return "";
  int running = 0;
  std::set<long> present_global, present_local;
  for (long c : children) {
    std::string comm;
    char state = 0;
    long ppid = 0;
    if (!ReadStat(c, &comm, &state, &ppid) || state == 'Z' || state == 'X') continue;  // gone
    ++running;
    const long g = EnvOf(c, "PMI_RANK"), l = EnvOf(c, "MPI_LOCALRANKID");
    if (g >= 0) present_global.insert(g);
    if (l >= 0) present_local.insert(l);
  }
  if (running >= local_n) return "";
  if (local_n == size) {  // every rank of the job runs here: the missing ones are known
    std::vector<int> gone;
    for (int r = 0; r < size; ++r) {
      if (present_global.count(r)) continue;
      gone.push_back(r);
    }
    if (gone.empty() || (int)present_global.size() != running) return "";  // some unreadable
    return std::string(gone.size() == 1 ? "rank " : "ranks ") + RankList(gone) + " of " +
           std::to_string(size) + (gone.size() == 1 ? " has" : " have") + " exited";
  }
  std::vector<int> gone;
  for (int l = 0; l < local_n; ++l) {
    if (!present_local.count(l)) gone.push_back(l);
  }
  std::string which = (int)present_local.size() == running && !gone.empty()
                          ? std::string(gone.size() == 1 ? " (local rank " : " (local ranks ") + RankList(gone) + ")"
                          : "";
  return std::to_string(local_n - running) + " of the " + std::to_string(local_n) +
         " ranks of this host" + which + (local_n - running == 1 ? " has" : " have") + " exited";
}

}  // namespace mxhorovod
