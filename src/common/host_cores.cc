#include "host_cores.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdint>
#include <vector>

namespace mxhorovod {

namespace {

// FNV-1a: the same string gives the same number on every rank.
uint64_t Fnv(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

}  // namespace

std::string HostCores::Describe() const {
  char q[32] = "none";
  if (quota > 0) std::snprintf(q, sizeof(q), "%g CPU%s", quota, quota == 1 ? "" : "s");
  return std::to_string(affinity) + (affinity == 1 ? " CPU" : " CPUs") +
         " in the ranks' affinity masks, cgroup CPU quota " + q;
}

HostCores CountHostCores(MPI_Comm local, const CpuQuota& quota) {
  constexpr int kWords = CPU_SETSIZE / 64;
  std::vector<uint64_t> mask(kWords, 0);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) mask[c / 64] |= 1ull << (c % 64);
    }
  } else {  // more CPUs than a cpu_set_t holds: the machine's count
    long online = std::min<long>(std::max<long>(sysconf(_SC_NPROCESSORS_ONLN), 1), CPU_SETSIZE);
    for (long c = 0; c < online; ++c) mask[c / 64] |= 1ull << (c % 64);
  }
  MPI_Allreduce(MPI_IN_PLACE, mask.data(), kWords, MPI_UINT64_T, MPI_BOR, local);
  HostCores out;
  for (uint64_t w : mask) out.affinity += __builtin_popcountll(w);
  int size = 1;
  MPI_Comm_size(local, &size);
  std::vector<double> quotas(size);
  std::vector<uint64_t> groups(size);
  uint64_t mine = Fnv(quota.cgroup);
  MPI_Allgather(&quota.cpus, 1, MPI_DOUBLE, quotas.data(), 1, MPI_DOUBLE, local);
  MPI_Allgather(&mine, 1, MPI_UINT64_T, groups.data(), 1, MPI_UINT64_T, local);
  std::vector<uint64_t> counted;
  for (int r = 0; r < size && out.quota >= 0; ++r) {
    if (quotas[r] <= 0) {
      out.quota = -1;  // a rank without a quota: the affinity bounds the host
    } else if (std::find(counted.begin(), counted.end(), groups[r]) == counted.end()) {
      counted.push_back(groups[r]);
      out.quota += quotas[r];
    }
  }
  if (out.quota < 0) out.quota = 0;
  out.usable = out.quota > 0 ? std::min<double>(out.affinity, out.quota) : out.affinity;
  return out;
}

}  // namespace mxhorovod
