#include "job_abort.h"

#include <fcntl.h>
#include <mpi.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "logging.h"
#include "timeline.h"

namespace mxhorovod {
namespace {

struct Report {
  int sig;
  const char* name;
  bool only_if_default;  // SIGTERM: a program that handles it decides what happens
  struct sigaction previous;
  bool installed;
  char line[320];        // prepared outside the handler: write(2) is all the handler does
  size_t len;
  char child_line[320];  // the same for a process forked by the rank (a DataLoader worker)
  size_t child_len;
};

Report g_reports[] = {
    {SIGSEGV, "SIGSEGV", false, {}, false, {0}, 0, {0}, 0},
    {SIGBUS, "SIGBUS", false, {}, false, {0}, 0, {0}, 0},
    {SIGFPE, "SIGFPE", false, {}, false, {0}, 0, {0}, 0},
    {SIGILL, "SIGILL", false, {}, false, {0}, 0, {0}, 0},
    {SIGABRT, "SIGABRT", false, {}, false, {0}, 0, {0}, 0},
    {SIGTERM, "SIGTERM", true, {}, false, {0}, 0, {0}, 0},
};

pid_t g_rank_pid = 0;  // the rank's process; a forked child inherits the handlers

// The crash-handler watchdog. The handler that ran before ours may not end the process:
// MXNet's (SIGSEGV) prints its report and calls exit(), which runs every library's exit
// handlers and destructors while the other threads (engine workers, our background thread,
// MPI's) still run and may hold the locks those need; a rank stuck there never closes its
// connection to mpirun, so the launcher never ends the job and every other rank waits
// forever (seen once in CI: the segfault test's rank 1 printed MXNet's report, then nothing,
// for 120 s). So the first fatal signal arms alarm(kStuckLimitS); if the process still runs
// then, the SIGALRM handler says so and ends it by _exit(128 + signal).
const unsigned kStuckLimitS = 10;
volatile sig_atomic_t g_dying_of = 0;  // the first fatal signal, once the watchdog is armed
char g_stuck_line[400];
size_t g_stuck_len = 0;
char g_stuck_child_line[400];
size_t g_stuck_child_len = 0;

// MPICH keeps its shared-memory segments (/dev/shm/mpich_shm_*, about 1 MB per local rank)
// linked until MPI_Finalize. A job ended by MPI_Abort, or by a rank dying of a signal, never
// gets there, so each left one file per host in /dev/shm, a tmpfs whose files hold RAM
// until a reboot (a machine that ran the test suite for a day had 600 of them, 1.4 GB).
// Unlinking the names of those this process maps removes them once the ranks are gone; the
// mappings themselves stay valid, and every rank of the job attached long before (init()
// is a collective of all ranks). Async-signal-safe: open/read/unlink on a stack buffer, no
// allocation. Only the rank's own process (not a child it forked) does it. Before the
// signal reports are installed (g_rank_pid 0: init() failed, a bad or disagreeing setting,
// or a script failed before init() where mpi4py started MPI) only AbortJob calls this, and
// the process that started MPI is the rank's (those jobs left their files behind).
void UnlinkMPIShm() {
  static const char kPrefix[] = "/dev/shm/mpich_shm_";
  static const char kDeleted[] = " (deleted)";
  if (g_rank_pid != 0 && getpid() != g_rank_pid) return;
  int fd = ::open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[4096];
  char line[512];
  size_t len = 0;
  bool too_long = false;
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof(buf))) > 0 || (n < 0 && errno == EINTR)) {
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] != '\n') {
        if (len + 1 < sizeof(line)) line[len++] = buf[i];
        else too_long = true;
        continue;
      }
      line[len] = '\0';
      const char* path = too_long ? nullptr : std::strstr(line, kPrefix);
      const size_t d = sizeof(kDeleted) - 1;
      if (path && !(len >= d && std::memcmp(line + len - d, kDeleted, d) == 0)) {
        ::unlink(path);  // several mappings of one file: the later calls find none
      }
      len = 0;
      too_long = false;
    }
  }
  ::close(fd);
}

void OnStuck(int) {
  const bool rank = getpid() == g_rank_pid;
  const char* line = rank ? g_stuck_line : g_stuck_child_line;
  size_t len = rank ? g_stuck_len : g_stuck_child_len;
  if (len) {
    ssize_t ignored = ::write(2, line, len);
    (void)ignored;
  }
  _exit(128 + g_dying_of);
}

// Arms the watchdog once per process (a previous handler that returns on a fault that
// recurs, as a Python-level SIGSEGV handler does, calls ours again and again).
// Async-signal-safe: sigaction, sigprocmask and alarm only.
void ArmStuckWatchdog(int sig) {
  if (g_dying_of) return;
  g_dying_of = sig;
  struct sigaction on_alarm;
  std::memset(&on_alarm, 0, sizeof(on_alarm));
  on_alarm.sa_handler = &OnStuck;
  sigemptyset(&on_alarm.sa_mask);
  sigaction(SIGALRM, &on_alarm, nullptr);
  sigset_t alarm_only;
  sigemptyset(&alarm_only);
  sigaddset(&alarm_only, SIGALRM);
  sigprocmask(SIG_UNBLOCK, &alarm_only, nullptr);  // this thread at least takes it
  alarm(kStuckLimitS);
}

// A signal sent by a process (kill(), raise(), os.kill(), os.abort(), sigqueue()), not
// raised by the kernel for a fault of this process: a handler that returns from it lets
// the process go on, as it chose to.
bool SentByAProcess(const siginfo_t* info) { return info && info->si_code <= 0; }

// CPython's C handler for every Python-level signal handler (it sets a flag for the
// interpreter to call the Python function, and returns). Learned from SIGINT, which Python
// handles from its start (default_int_handler); null when it does not.
void (*g_python_handler)(int) = nullptr;

void LearnPythonHandler() {
  struct sigaction on_int;
  if (sigaction(SIGINT, nullptr, &on_int) != 0 || (on_int.sa_flags & SA_SIGINFO)) return;
  if (!g_python_handler && on_int.sa_handler != SIG_DFL && on_int.sa_handler != SIG_IGN) {
    g_python_handler = on_int.sa_handler;
  }
}

void OnFatalSignal(int sig, siginfo_t* info, void* context) {
  for (auto& r : g_reports) {
    if (r.sig != sig) continue;
    const struct sigaction& prev = r.previous;
    if (g_python_handler && !(prev.sa_flags & SA_SIGINFO) &&
        prev.sa_handler == g_python_handler && SentByAProcess(info)) {
      // The script's Python handler (set before init()) decides: it returns, and the
      // process goes on unless the Python function ends it. It must not be said to die,
      // nor be ended 10 s later by the watchdog (it was: os.kill(pid, SIGABRT) with a
      // handler that logs it ended a healthy rank with 134). A fault (si_code > 0) recurs
      // when the handler returns: that takes the path below.
      prev.sa_handler(sig);
      return;
    }
    // getpid() is async-signal-safe. A child forked after init() (a DataLoader worker, which
    // its pool ends with SIGTERM as a matter of course) is not the rank: it must not claim
    // that the rank dies and the launcher ends the job. SIGTERM there is silent; the fatal
    // signals say which process it was.
    if (getpid() != g_rank_pid) {
      if (r.child_len && !r.only_if_default) {
        ssize_t ignored = ::write(2, r.child_line, r.child_len);
        (void)ignored;
      }
    } else if (r.len) {
      ssize_t ignored = ::write(2, r.line, r.len);
      (void)ignored;
    }
    // The process ends now, whatever the previous handler does (the watchdog sees to it).
    ArmStuckWatchdog(sig);
    // The timeline's last events show what happened: on disk first (at most a few ms).
    if (getpid() == g_rank_pid) Timeline::Get().AwaitFlushInSignal(500);
    UnlinkMPIShm();
    if (prev.sa_flags & SA_SIGINFO) {
      if (prev.sa_sigaction) prev.sa_sigaction(sig, info, context);
      return;
    }
    if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
      prev.sa_handler(sig);
      return;
    }
    // Default action: die of this signal once the handler returns (it is blocked until then).
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
}

void PrepareLines(int rank) {
  char host[128] = {0};
  gethostname(host, sizeof(host) - 1);
  g_rank_pid = getpid();
  for (auto& r : g_reports) {
    r.len = r.child_len = 0;
    if (!LogEnabled(LogLevel::kError)) continue;
    int n = std::snprintf(r.line, sizeof(r.line),
                          "[%d]<error> mxhorovod: rank %d (pid %d on %s) got %s; it dies of it "
                          "and the launcher ends the job\n",
                          rank, rank, (int)g_rank_pid, host, r.name);
    r.len = n > 0 ? std::min<size_t>((size_t)n, sizeof(r.line) - 1) : 0;
    n = std::snprintf(r.child_line, sizeof(r.child_line),
                      "[%d]<error> mxhorovod: a process forked by rank %d (pid %d on %s) got %s; "
                      "that process dies of it\n",
                      rank, rank, (int)g_rank_pid, host, r.name);
    r.child_len = n > 0 ? std::min<size_t>((size_t)n, sizeof(r.child_line) - 1) : 0;
  }
  g_stuck_len = g_stuck_child_len = 0;
  if (!LogEnabled(LogLevel::kError)) return;
  int n = std::snprintf(g_stuck_line, sizeof(g_stuck_line),
                        "[%d]<error> mxhorovod: rank %d (pid %d on %s) still runs %u s after its "
                        "fatal signal: the crash handler that ran after mxhorovod's is stuck "
                        "(MXNet's calls exit(), whose exit handlers can wait forever on locks "
                        "that other threads hold); ending it (exit code 128 + the signal)\n",
                        rank, rank, (int)g_rank_pid, host, kStuckLimitS);
  g_stuck_len = n > 0 ? std::min<size_t>((size_t)n, sizeof(g_stuck_line) - 1) : 0;
  n = std::snprintf(g_stuck_child_line, sizeof(g_stuck_child_line),
                    "[%d]<error> mxhorovod: a process forked by rank %d (pid %d on %s) still runs "
                    "%u s after its fatal signal: the crash handler that ran after mxhorovod's "
                    "is stuck; ending that process (exit code 128 + the signal)\n",
                    rank, rank, (int)g_rank_pid, host, kStuckLimitS);
  g_stuck_child_len = n > 0 ? std::min<size_t>((size_t)n, sizeof(g_stuck_child_line) - 1) : 0;
}

// Waits (up to limit_ms) until the launcher has read what this process wrote to stdout and
// stderr. Hydra's proxy reads them from pipes and is killed by MPI_Abort: what is still in a
// pipe then is lost (a traceback printed just before the abort came out cut in half).
void DrainOutput(int limit_ms) {
  std::fflush(stdout);
  std::fflush(stderr);
  const int step_ms = 5;
  for (int fd : {1, 2}) {
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode)) continue;
    int unread = 0;
    while (limit_ms > 0 && ioctl(fd, FIONREAD, &unread) == 0 && unread > 0) {
      struct timespec pause = {0, step_ms * 1000000L};
      nanosleep(&pause, nullptr);
      limit_ms -= step_ms;
    }
  }
}

}  // namespace

bool MPIWorld(int* rank, int* size) {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (!inited || finalized) return false;
  MPI_Comm_rank(MPI_COMM_WORLD, rank);
  MPI_Comm_size(MPI_COMM_WORLD, size);
  return true;
}

void AbortJob(int code) {
  Timeline::Get().Stop();
  DrainOutput(2000);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) {
    UnlinkMPIShm();
    MPI_Abort(MPI_COMM_WORLD, code);
  }
}

void InstallSignalReports(int rank) {
  // Lines are rebuilt before the handlers are (re)installed; a signal arriving in between
  // may print the previous rank's line, which is the same process.
  PrepareLines(rank);
  LearnPythonHandler();
  for (auto& r : g_reports) {
    if (r.installed) continue;
    struct sigaction current;
    if (sigaction(r.sig, nullptr, &current) != 0) continue;
    bool is_default = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_DFL;
    bool ignored = !(current.sa_flags & SA_SIGINFO) && current.sa_handler == SIG_IGN;
    if (ignored || (r.only_if_default && !is_default)) continue;
    struct sigaction mine;
    std::memset(&mine, 0, sizeof(mine));
    mine.sa_sigaction = &OnFatalSignal;
    mine.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigemptyset(&mine.sa_mask);
    r.previous = current;
    if (sigaction(r.sig, &mine, nullptr) == 0) r.installed = true;
  }
}

void ReleaseMPIShmNames() { UnlinkMPIShm(); }

}  // namespace mxhorovod
