// The background thread: it starts MPI (startup.h), then runs cycles until shutdown: each
// negotiates what every rank has submitted (controller.h), runs the control operations
// (add / remove a process set), plans the fusion groups (fusion.h) and runs them
// (executor.h), then sleeps until the next cycle or new work. It makes every MPI call of
// the library.
#ifndef MXHOROVOD_COMMON_BACKGROUND_LOOP_H_
#define MXHOROVOD_COMMON_BACKGROUND_LOOP_H_

#include <cstdint>
#include <string>
#include <vector>

#include "config.h"
#include "host_cores.h"
#include "tensor_queue.h"

namespace mxhorovod {

struct StartArgs {
  int64_t comm_f2c;
  std::vector<int> ranks;
  std::vector<std::vector<int>> process_sets;
  Config cfg;
  std::string cfg_error;  // this rank's bad setting ("" if none): init() fails on every rank
  CpuQuotas quotas;       // this rank's cgroup CPU quotas (host_cores.h)
};

// The thread's body (Initialize starts it): reports its start-up in S() (started,
// start_status) and runs until shutdown or a fatal error, then fails what is left.
void BackgroundLoop(StartArgs args);

// Completes the entries with an Aborted error: "<op> '<name>' did not run: <why>".
void FailEntries(std::vector<TensorTableEntry>&& entries, const std::string& why);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_BACKGROUND_LOOP_H_
