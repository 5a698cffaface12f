#include "process_set.h"

#include <algorithm>
#include <sstream>

namespace mxhorovod {

void ProcessSet::Open(MPI_Comm c, const Config& cfg) {
  comm = c;
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  backend.reset(new MPIBackend(comm, cfg.slice_bytes, cfg.link_slice_bytes));
  if (size > 1) {
    std::string why;
    cma = CMABackend::Create(backend.get(), comm, ranks, cfg.cma, cfg.cma_min_bytes, &why);
    LogDebug(Describe() + (cma ? ": allreduce of " + std::to_string(cma->min_bytes()) +
                                     " bytes and more by cross-memory attach (process_vm_readv)"
                               : ": allreduce through MPI only: " + why));
  }
  executor.reset(new Executor(cma ? static_cast<Backend*>(cma.get()) : backend.get(), rank, size));
  controller.reset(new Controller(comm, rank, size, (size_t)cfg.cache_capacity, &queue, cfg.stall));
  if (id != 0) controller->set_stall_scope(Describe(), ranks);  // [stall]
  controller->set_link(backend->other_hosts());
}

void ProcessSet::UseHierarchical(MPI_Comm local, MPI_Comm cross, const Config& cfg) {
  hierarchical.reset(new MPIHierarchicalBackend(backend.get(), local, cross, cfg.slice_bytes,
                                                cfg.link_slice_bytes));
  executor.reset(new Executor(hierarchical.get(), rank, size));
}

void ProcessSet::SetSliceBytes(int64_t bytes) {
  if (backend) backend->set_slice_bytes(bytes);
  if (hierarchical) hierarchical->set_slice_bytes(bytes);
}

void ProcessSet::Close() {
  controller.reset();
  executor.reset();
  hierarchical.reset();
  cma.reset();
  backend.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm);
  comm = MPI_COMM_NULL;
}

std::string ProcessSet::Describe() const {
  return "process set " + std::to_string(id) + " (ranks " + RanksString(ranks) + ")";
}

std::shared_ptr<ProcessSet> ProcessSetTable::Get(int32_t id) const {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sets_.find(id);
  return it == sets_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetTable::All() const {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::shared_ptr<ProcessSet>> out;
  for (const auto& kv : sets_) out.push_back(kv.second);
  return out;
}

int32_t ProcessSetTable::Find(const std::vector<int>& ranks) const {
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& kv : sets_) {
    if (kv.second->ranks == ranks) return kv.first;
  }
  return -1;
}

void ProcessSetTable::Put(std::shared_ptr<ProcessSet> set) {
  std::lock_guard<std::mutex> lk(mu_);
  sets_[set->id] = std::move(set);
}

std::shared_ptr<ProcessSet> ProcessSetTable::Erase(int32_t id) {
  std::lock_guard<std::mutex> lk(mu_);
  auto it = sets_.find(id);
  if (it == sets_.end()) return nullptr;
  auto set = it->second;
  sets_.erase(it);
  return set;
}

std::vector<std::shared_ptr<ProcessSet>> ProcessSetTable::Clear() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<std::shared_ptr<ProcessSet>> out;
  for (auto& kv : sets_) out.push_back(kv.second);
  sets_.clear();
  return out;
}

Status NormalizeRanks(const std::vector<int>& ranks, int size, std::vector<int>* out) {
  if (ranks.empty()) return Status::InvalidArgument("a process set needs at least one rank");
  std::vector<int> v(ranks);
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] < 0 || v[i] >= size) {
      return Status::InvalidArgument("process set " + RanksString(ranks) + ": rank " + std::to_string(v[i]) +
                                     " is not a rank of this job (size " + std::to_string(size) + ")");
    }
    if (i && v[i] == v[i - 1]) {
      return Status::InvalidArgument("process set " + RanksString(ranks) + ": rank " + std::to_string(v[i]) +
                                     " is listed twice");
    }
  }
  *out = std::move(v);
  return Status::OK();
}

std::string RanksString(const std::vector<int>& ranks) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < ranks.size(); ++i) os << (i ? ", " : "") << ranks[i];
  os << "]";
  return os.str();
}

}  // namespace mxhorovod
