// The core's process-wide state, shared by the start-up (startup.cc), the background loop
// (background_loop.cc) and the calls of the core's API (operations.cc). Internal to the
// core: the adapters use operations.h.
#ifndef MXHOROVOD_COMMON_STATE_H_
#define MXHOROVOD_COMMON_STATE_H_

#include <sys/types.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "operations.h"
#include "process_set.h"
#include "status.h"

namespace mxhorovod {

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
  std::atomic<int> last_joined_rank{-1};    // set before a join's callback (background_loop.cc)
  std::atomic<bool> joining{false};         // a join() call of this process is waiting
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

// The process's one State, never destroyed: engine threads may outlive main().
State& S();
// Wakes the background thread before its cycle time is up (new work, shutdown).
void Wake();

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_STATE_H_
