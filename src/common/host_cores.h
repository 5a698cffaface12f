// How many cores the ranks of one host can use together, to choose how their waits behave
// (mpi_wait.h: a rank that shares its core with another must give it away at once). The
// machine's online count over-counts under `taskset`, a cpuset, or a container's CPU quota
// (`docker run --cpus`, a Kubernetes CPU limit), where the cores are visible but throttled.
#ifndef MXHOROVOD_COMMON_HOST_CORES_H_
#define MXHOROVOD_COMMON_HOST_CORES_H_

#include <mpi.h>

#include <string>

namespace mxhorovod {

// A rank's cgroup CPU quota: `cpus` (0: none) from `cgroup` (its path, to count a quota
// that several ranks share once).
struct CpuQuota {
  double cpus = 0;
  std::string cgroup;
};

struct HostCores {
  int affinity = 0;    // CPUs in the union of the host's ranks' affinity masks
  double quota = 0;    // the host's ranks' CPU quotas, each cgroup once (0: none)
  double usable = 0;   // the smaller of the two (affinity alone without a quota)
  std::string Describe() const;
};

// Collective over `local` (the ranks of this host). `quota`: this rank's (mxhorovodrun/
// cores.py reads it; hvd.init() passes it).
HostCores CountHostCores(MPI_Comm local, const CpuQuota& quota);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_HOST_CORES_H_
