#include "host_cores.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <set>
#include <system_error>

#include "logging.h"

namespace mxhorovod {

namespace {

// "key=cpus;key=cpus" -> pairs; false on a malformed or non-positive entry.
bool ParseChain(const std::string& s, std::vector<std::pair<std::string, double>>* out) {
  out->clear();
  size_t pos = 0;
  while (pos < s.size()) {
    size_t end = s.find(';', pos);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(pos, end - pos);
    const size_t eq = item.find('=');
    if (eq == 0 || eq == std::string::npos) return false;
    char* rest = nullptr;
    const double cpus = std::strtod(item.c_str() + eq + 1, &rest);
    if (rest == item.c_str() + eq + 1 || *rest != '\0' || !(cpus > 0)) return false;
    out->emplace_back(item.substr(0, eq), cpus);
    pos = end + 1;
  }
  return true;
}

// Every rank's chain string, gathered over `local`.
std::vector<std::string> GatherStrings(MPI_Comm local, const std::string& mine) {
  int size = 1;
  MPI_Comm_size(local, &size);
  int len = static_cast<int>(mine.size());
  std::vector<int> lens(size), displs(size);
  MPI_Allgather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, local);
  int total = 0;
  for (int r = 0; r < size; ++r) {
    displs[r] = total;
    total += lens[r];
  }
  std::string all(static_cast<size_t>(total), '\0');
  MPI_Allgatherv(mine.data(), len, MPI_CHAR, &all[0], lens.data(), displs.data(), MPI_CHAR, local);
  std::vector<std::string> out;
  for (int r = 0; r < size; ++r) out.push_back(all.substr(displs[r], lens[r]));
  return out;
}

}  // namespace

std::string HostCores::Describe() const {
  char q[32] = "none";
  if (quota > 0) std::snprintf(q, sizeof(q), "%g CPU%s", quota, quota == 1 ? "" : "s");
  return std::to_string(affinity) + (affinity == 1 ? " CPU" : " CPUs") +
         " in the ranks' affinity masks, cgroup CPU quota " + q;
}

double HostQuota(const std::vector<std::string>& chain_strings) {
  std::vector<std::vector<std::pair<std::string, double>>> chains(chain_strings.size());
  for (size_t i = 0; i < chains.size(); ++i) {
    if (!ParseChain(chain_strings[i], &chains[i])) return 0;
  }
  struct Node {
    double quota = 0;
    std::string parent;
    bool holds_rank = false;
    std::set<std::string> children;
  };
  std::map<std::string, Node> nodes;
  for (const auto& chain : chains) {
    if (chain.empty()) return 0;  // a rank no quota bounds
    for (size_t i = 0; i < chain.size(); ++i) {
      Node& n = nodes[chain[i].first];
      n.quota = chain[i].second;
      const std::string parent = i + 1 < chain.size() ? chain[i + 1].first : std::string();
      if (!n.parent.empty() && n.parent != parent) return 0;  // ranks disagree: no bound
      n.parent = parent;
    }
    nodes[chain[0].first].holds_rank = true;
  }
  for (auto& kv : nodes) {
    if (kv.second.parent.empty()) continue;
    auto p = nodes.find(kv.second.parent);
    if (p == nodes.end()) return 0;
    p->second.children.insert(kv.first);
  }
  // From the outermost cgroups down: each node has one parent, so no cycle is reachable.
  std::function<double(const Node&)> allows = [&](const Node& n) -> double {
    if (n.holds_rank) return n.quota;
    double sum = 0;
    for (const auto& c : n.children) sum += allows(nodes[c]);
    return std::min(n.quota, sum);
  };
  double total = 0;
  for (const auto& kv : nodes) {
    if (kv.second.parent.empty()) total += allows(kv.second);
  }
  return total;
}

HostCores CountHostCores(MPI_Comm local, const CpuQuotas& quotas) {
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
  out.quota = HostQuota(GatherStrings(local, quotas.chain));
  out.usable = out.quota > 0 ? std::min<double>(out.affinity, out.quota) : out.affinity;
  return out;
}

void PinToCore(const std::vector<int>& cores, int local_rank, int local_size) {
  const std::string what = "HOROVOD_THREAD_AFFINITY";
  if ((int)cores.size() < local_size) {
    LogWarning(what + " names " + std::to_string(cores.size()) + " core(s) for the " +
               std::to_string(local_size) + " ranks of this host (one per local rank, in "
               "local rank order): the background thread is not pinned");
    return;
  }
  const int core = cores[local_rank];
  cpu_set_t set;
  CPU_ZERO(&set);
  int rc = EINVAL;
  if (core < CPU_SETSIZE) {
    CPU_SET(core, &set);
    rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
  }
  if (rc != 0) {
    LogWarning(what + ": local rank " + std::to_string(local_rank) + " cannot run its "
               "background thread on core " + std::to_string(core) + " (" +
               std::system_category().message(rc) + "; not a core this process may use?): "
               "not pinned");
    return;
  }
  LogDebug("background thread pinned to core " + std::to_string(core) + " (" + what + ")");
}

}  // namespace mxhorovod
