// The core's public surface for the adapters: start and stop the background thread,
// topology, and submitting entries. Framework-free.
#ifndef MXHOROVOD_COMMON_OPERATIONS_H_
#define MXHOROVOD_COMMON_OPERATIONS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common.h"
#include "host_cores.h"
#include "process_set.h"
#include "tensor_queue.h"

namespace mxhorovod {

// Fortran handles are 32-bit (and negative for MPICH), so this cannot be one.
constexpr int64_t kWorldComm = INT64_MIN;
// Starts MPI (if nobody has) and the background thread. comm_f2c: a Fortran handle
// (mpi4py's comm.py2f()) of the parent communicator, or kWorldComm for MPI_COMM_WORLD; ranks: if
// non-empty, the job is those ranks of the parent. The library works on a duplicate.
// process_sets: sets registered at start (ids 1, 2, ... in this order; every rank must
// pass the same list); dynamic_process_sets: allow AddProcessSet/RemoveProcessSet later
// (also on with HOROVOD_DYNAMIC_PROCESS_SETS=1). A second call while running is a no-op.
Status Initialize(int64_t comm_f2c, const std::vector<int>& ranks,
                  const std::vector<std::vector<int>>& process_sets = {},
                  bool dynamic_process_sets = false, const CpuQuotas& quotas = {});
// Waits until every collective this process has called has completed (on every set) or
// the loop has stopped; gives up (false) when none has completed for 10 s (or the stall
// check time, HOROVOD_STALL_CHECK_TIME_SECONDS, if shorter). For a clean exit: a rank that finishes
// first must not shut down its peers while its last collectives (called, still in MXNet's
// engine or in negotiation) have not run. Call without the GIL.
bool WaitLocalWork();
// Agrees with the peers to stop, fails what is pending, joins the thread. Idempotent.
// Shutdown and FinalizeMPI do nothing in a child forked after init().
void Shutdown();
// MPI_Finalize, if this library called MPI_Init and MPI is not finalized yet (at exit);
// returns whether it did.
bool FinalizeMPI();
bool IsInitialized();
// Why the last run stopped (empty if shutdown() was called here), for error messages.
std::string StopReason();

struct Topology {
  int rank = -1, size = -1, local_rank = -1, local_size = -1, cross_rank = -1, cross_size = -1;
};
Topology GetTopology();  // all -1 before init() and after this rank's shutdown()
bool MPIThreadsSupported();

// Process sets. The global set (id 0, every rank) exists while running.
std::vector<std::shared_ptr<ProcessSet>> ProcessSets();  // ascending id; empty when stopped
// The set a collective is submitted to, checked: registered and this rank a member.
// The error names the call: "<op> '<name>'", or `op` alone when `name` is null.
Status MemberSet(int32_t id, const char* op, const char* name, std::shared_ptr<ProcessSet>* out);
// Collective over every rank of the job, in the same order everywhere; block until done.
Status AddProcessSet(const std::vector<int>& ranks, int32_t* id);
Status RemoveProcessSet(int32_t id);
// hvd.join(): this rank is out of data. Blocks until every rank of the job has joined,
// adding zeros to the other ranks' Sum and Average allreduces meanwhile (their other
// collectives fail, naming the joined ranks); *last_joined_rank: the rank that joined last.
// Global: the global process set only.
Status Join(int* last_joined_rank);

// Hands entries (all of one process set) to the background thread; fails them at once
// (their callbacks run with the error) if the library or their set has stopped meanwhile.
void Enqueue(std::vector<TensorTableEntry>&& entries);
// The same for entries of `set` (from MemberSet): no lookup, and no lock but the queue's.
void Enqueue(ProcessSet& set, std::vector<TensorTableEntry>&& entries);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_OPERATIONS_H_
