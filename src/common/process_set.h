// Process sets: a subset of the job's ranks that negotiates and runs collectives on its own
// communicator, with its own tensor queue, controller (coordinator = its rank 0), response
// cache and fusion buffer. The global set (id 0) holds every rank. Several sets run in the
// same background thread, one cycle after the other, always in id order on every rank.
#ifndef MXHOROVOD_COMMON_PROCESS_SET_H_
#define MXHOROVOD_COMMON_PROCESS_SET_H_

#include <mpi.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "controller.h"
#include "executor.h"
#include "ops/cma_backend.h"
#include "ops/mpi_backend.h"
#include "ops/mpi_hierarchical.h"
#include "tensor_queue.h"

namespace mxhorovod {

struct ProcessSet {
  int32_t id = 0;
  std::vector<int> ranks;  // ranks of the job (the global set's numbering), ascending
  bool included = false;   // this process is a member
  int rank = -1;           // this process's rank in the set; -1 when not a member
  int size = 0;
  TensorQueue queue;       // lives as long as any engine operation holds the set
  // Members only; made and destroyed by the background thread (it makes every MPI call).
  MPI_Comm comm = MPI_COMM_NULL;
  std::unique_ptr<MPIBackend> backend;
  std::unique_ptr<CMABackend> cma;  // allreduce on one host, when every member can (MXHOROVOD_CMA)
  std::unique_ptr<MPIHierarchicalBackend> hierarchical;  // global set, HOROVOD_HIERARCHICAL_ALLREDUCE
  std::unique_ptr<Executor> executor;
  std::unique_ptr<Controller> controller;

  // Builds the MPI side on `comm` (owned from now on). Background thread.
  void Open(MPI_Comm comm, const Config& cfg);
  // Allreduce within hosts, across them, then within (the global set: `local` and `cross`
  // are the host grouping of its communicator; not owned).
  void UseHierarchical(MPI_Comm local, MPI_Comm cross, const Config& cfg);
  // Autotuning: the per-call slice size of the data plane.
  void SetSliceBytes(int64_t bytes);
  // Frees the MPI side (communicator included). Background thread; idempotent.
  void Close();
  std::string Describe() const;  // "process set 2 (ranks [0, 1])"
};

// Thread-safe table of the registered sets, read by the threads that submit collectives.
class ProcessSetTable {
 public:
  std::shared_ptr<ProcessSet> Get(int32_t id) const;  // nullptr when not registered
  std::vector<std::shared_ptr<ProcessSet>> All() const;  // ascending id
  int32_t Find(const std::vector<int>& ranks) const;  // id of the set with these ranks, or -1
  void Put(std::shared_ptr<ProcessSet> set);
  std::shared_ptr<ProcessSet> Erase(int32_t id);
  std::vector<std::shared_ptr<ProcessSet>> Clear();

 private:
  mutable std::mutex mu_;
  std::map<int32_t, std::shared_ptr<ProcessSet>> sets_;
};

// Checks a list of ranks for a process set of a job of `size` ranks: not empty, in range,
// no repeats. Returns the ranks in ascending order.
Status NormalizeRanks(const std::vector<int>& ranks, int size, std::vector<int>* out);
std::string RanksString(const std::vector<int>& ranks);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_PROCESS_SET_H_
