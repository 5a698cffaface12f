// How many cores the ranks of one host can use together, to choose how their waits behave
// (mpi_wait.h: a rank that shares its core with another must give it away at once). The
// machine's online count over-counts under `taskset`, `mpirun -bind-to core` (each rank
// sees one core: the union counts), or a container's CPU quota (`docker run --cpus`, a
// Kubernetes CPU limit), where the cores are visible but throttled.
#ifndef MXHOROVOD_COMMON_HOST_CORES_H_
#define MXHOROVOD_COMMON_HOST_CORES_H_

#include <mpi.h>

#include <string>
#include <vector>

namespace mxhorovod {

// A rank's cgroup CPU quotas, innermost cgroup first: "key=cpus;key=cpus..." with key the
// cgroup's identity on the host (the same cgroup has the same key in every rank) and cpus
// its quota in CPUs; "" without a quota (mxhorovodrun/cores.py reads them; hvd.init()
// passes them).
struct CpuQuotas {
  std::string chain;
};

struct HostCores {
  int affinity = 0;    // CPUs in the union of the host's ranks' affinity masks
  double quota = 0;    // what the host's ranks' cgroups allow them together (0: no bound)
  double usable = 0;   // the smaller of the two (the affinity alone without a quota)
  std::string Describe() const;
};

// The CPUs that the cgroups of some ranks allow those ranks together, from each rank's
// chain (CpuQuotas::chain): a cgroup holding a rank allows its quota; one holding none
// allows the smaller of its quota and what its children allow together; the host, the sum
// over the outermost cgroups. 0 when some rank has no quota, or the chains are malformed
// or disagree: nothing bounds the host then but the affinity.
double HostQuota(const std::vector<std::string>& chains);

// Collective over `local` (the ranks of this host). Before PinToCore: it reads the calling
// thread's affinity.
HostCores CountHostCores(MPI_Comm local, const CpuQuotas& quotas);

// HOROVOD_THREAD_AFFINITY, as Horovod reads it: the calling (background) thread of local
// rank i runs on core `cores[i]`. Fewer ids than local ranks, or a core this process may not
// use, leave the thread unpinned, with a warning that says why.
void PinToCore(const std::vector<int>& cores, int local_rank, int local_size);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_HOST_CORES_H_
