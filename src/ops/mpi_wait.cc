#include "mpi_wait.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <string>

namespace mxhorovod {
namespace {
WaitPolicy g_policy;
}

void SetWaitPolicy(const WaitPolicy& p) { g_policy = p; }
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

Status WaitRequest(MPI_Request* req, const char* what) {
  int done = 0;
  long sleep_ns = 10000;
  for (int round = 0;; ++round) {
    int rc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) return CheckMPI(rc, what);
    if (done) return Status::OK();
    if (round < g_policy.spins) {
      sched_yield();
      continue;
    }
    timespec ts{0, sleep_ns};
    nanosleep(&ts, nullptr);
    sleep_ns = std::min<long>(sleep_ns * 2, 1000L * g_policy.max_sleep_us);
  }
}

}  // namespace mxhorovod
