#include "ops/cma_backend.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "ops/mpi_wait.h"

namespace mxhorovod {
namespace {

constexpr int64_t kScratchBytes = 256 << 10;  // a piece of a peer's block: fits in L2

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string("MPI error in ") + what + ": " + MPIErrorString(rc));
}

// The wait policy of the data plane (mpi_wait.h): MPI's blocking call, or the nonblocking
// one waited on with yield-then-sleep.
Status Barrier(MPI_Comm comm) {
  if (GetWaitPolicy().blocking_data) return Check(MPI_Barrier(comm), "MPI_Barrier");
  MPI_Request req;
  auto s = Check(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
  return s.ok() ? WaitRequest(&req, "MPI_Ibarrier") : s;
}

Status AllgatherBytes(const void* mine, int bytes, void* all, MPI_Comm comm) {
  if (GetWaitPolicy().blocking_data) {
    return Check(MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm), "MPI_Allgather");
  }
  MPI_Request req;
  auto s = Check(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm, &req),
                 "MPI_Iallgather");
  return s.ok() ? WaitRequest(&req, "MPI_Iallgather") : s;
}

std::string RanksWhere(const std::vector<int>& flags, int want) {
  std::string out;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] == want) out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

// First element of rank r's block when n elements are split evenly over size ranks.
int64_t BlockStart(int64_t n, int size, int r) { return n / size * r + std::min<int64_t>(r, n % size); }

struct Probe {
  int64_t pid;
  uint64_t addr;   // address of this rank's token
  uint64_t token;  // its value
  int64_t min_bytes;
  int32_t enabled;
  int32_t pad;
  char host[256];  // gethostname: ranks on hosts of other names are not used, even if they
                   // share a kernel (containers, network namespaces)
};

}  // namespace

std::unique_ptr<CMABackend> CMABackend::Create(MPIBackend* flat, MPI_Comm comm, bool enabled,
                                               int64_t min_bytes, std::string* why) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  // Let peers of the same user read this process under Yama's ptrace_scope=1 (no effect,
  // and EINVAL, where Yama is absent).
  if (enabled) prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
  // A value no other process holds at this address by chance.
  static uint64_t token;
  token = (uint64_t)getpid() * 0x9E3779B97F4A7C15ull ^
          (uint64_t)std::chrono::steady_clock::now().time_since_epoch().count();
  Probe mine{getpid(), (uint64_t)(uintptr_t)&token, token, min_bytes, enabled ? 1 : 0, 0, {}};
  gethostname(mine.host, sizeof(mine.host) - 1);
  std::vector<Probe> all(size);
  auto s = Check(MPI_Allgather(&mine, sizeof(Probe), MPI_BYTE, all.data(), sizeof(Probe), MPI_BYTE, comm),
                 "MPI_Allgather");
  if (!s.ok()) {
    *why = s.reason();
    return nullptr;
  }
  // Every rank tries every peer (when enabled), then all learn who could.
  std::string mine_err;
  int ok = enabled ? 1 : 0;
  for (int q = 0; q < size && ok; ++q) {
    if (q == rank || !all[q].enabled || std::strncmp(all[q].host, mine.host, sizeof(mine.host))) continue;
    uint64_t got = 0;
    iovec local{&got, sizeof(got)}, remote{(void*)(uintptr_t)all[q].addr, sizeof(got)};
    ssize_t n = process_vm_readv((pid_t)all[q].pid, &local, 1, &remote, 1, 0);
    if (n != (ssize_t)sizeof(got) || got != all[q].token) {
      ok = 0;
      mine_err = n < 0 ? std::strerror(errno) : "another process answers to its PID";
    }
  }
  std::vector<int> oks(size);
  s = Check(MPI_Allgather(&ok, 1, MPI_INT, oks.data(), 1, MPI_INT, comm), "MPI_Allgather");
  if (!s.ok()) {
    *why = s.reason();
    return nullptr;
  }
  std::vector<int> off(size), here(size);
  for (int q = 0; q < size; ++q) {
    off[q] = all[q].enabled;
    here[q] = std::strncmp(all[q].host, all[0].host, sizeof(all[0].host)) == 0;
  }
  if (std::find(off.begin(), off.end(), 0) != off.end()) {
    *why = "MXHOROVOD_CMA=0 on ranks " + RanksWhere(off, 0);
    return nullptr;
  }
  if (std::find(here.begin(), here.end(), 0) != here.end()) {
    *why = "ranks " + RanksWhere(here, 0) + " run on other hosts than rank 0 (" + all[0].host + ")";
    return nullptr;
  }
  if (std::find(oks.begin(), oks.end(), 0) != oks.end()) {
    *why = "ranks " + RanksWhere(oks, 0) + " cannot read their peers' memory (process_vm_readv" +
           (mine_err.empty() ? std::string(")") : ": " + mine_err + " here)") +
           ": other PID namespaces, or no ptrace permission";
    return nullptr;
  }
  std::vector<pid_t> pids(size);
  int64_t job_min = 0;
  for (int q = 0; q < size; ++q) {
    pids[q] = (pid_t)all[q].pid;
    job_min = std::max(job_min, all[q].min_bytes);
  }
  return std::unique_ptr<CMABackend>(new CMABackend(flat, comm, std::move(pids), job_min));
}

CMABackend::CMABackend(MPIBackend* flat, MPI_Comm comm, std::vector<pid_t> pids, int64_t min_bytes)
    : flat_(flat), comm_(comm), pids_(std::move(pids)), min_bytes_(min_bytes), scratch_(kScratchBytes) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

Status CMABackend::Read(int peer, void* local, uintptr_t remote, int64_t bytes) const {
  char* dst = static_cast<char*>(local);
  while (bytes > 0) {
    iovec l{dst, (size_t)bytes}, r{(void*)remote, (size_t)bytes};
    ssize_t n = process_vm_readv(pids_[peer], &l, 1, &r, 1, 0);
    if (n <= 0) {
      return Status::UnknownError("allreduce: reading rank " + std::to_string(peer) +
                                  "'s buffer (process_vm_readv) failed: " +
                                  (n < 0 ? std::strerror(errno) : "no bytes read"));
    }
    dst += n;
    remote += n;
    bytes -= n;
  }
  return Status::OK();
}

Status CMABackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                             bool* scaled) {
  const int esize = DTypeSize(dtype);
  if (count * esize < min_bytes_ || size_ == 1) {
    return flat_->Allreduce(buf, count, dtype, op, scale, scaled);
  }
  const MPI_Datatype type = flat_->Type(dtype);
  const MPI_Op mpi_op = flat_->ReductionOp(dtype, op, scale, scaled);
  char* mine = static_cast<char*>(buf);
  uint64_t addr = (uint64_t)(uintptr_t)buf;
  std::vector<uint64_t> addrs(size_);
  auto s = AllgatherBytes(&addr, sizeof(addr), addrs.data(), comm_);
  if (!s.ok()) return s;
  // Reduce-scatter: this rank's block, each peer's piece added into ours.
  Status failed;
  const int64_t lo = BlockStart(count, size_, rank_), hi = BlockStart(count, size_, rank_ + 1);
  const int64_t piece = kScratchBytes / esize;
  for (int64_t at = lo; at < hi && failed.ok(); at += piece) {
    const int n = (int)std::min(piece, hi - at);
    for (int k = 1; k < size_ && failed.ok(); ++k) {
      const int q = (rank_ + k) % size_;
      failed = Read(q, scratch_.data(), addrs[q] + at * esize, (int64_t)n * esize);
      if (failed.ok()) {
        failed = Check(MPI_Reduce_local(scratch_.data(), mine + at * esize, n, type, mpi_op),
                       "MPI_Reduce_local");
      }
    }
  }
  s = Barrier(comm_);
  if (!s.ok()) return s;
  // Allgather: every other block from its owner.
  for (int k = 1; k < size_ && failed.ok(); ++k) {
    const int q = (rank_ + k) % size_;
    const int64_t qlo = BlockStart(count, size_, q), qhi = BlockStart(count, size_, q + 1);
    failed = Read(q, mine + qlo * esize, addrs[q] + qlo * esize, (qhi - qlo) * esize);
  }
  // Everyone has read every block (our buffer may change once we return), and learns
  // whether every rank succeeded: a rank's failure leaves wrong bytes in all ranks' blocks.
  int ok = failed.ok() ? 1 : 0;
  std::vector<int> oks(size_);
  s = AllgatherBytes(&ok, sizeof(ok), oks.data(), comm_);
  if (!s.ok()) return s;
  if (!failed.ok()) return failed;
  if (std::find(oks.begin(), oks.end(), 0) != oks.end()) {
    return Status::UnknownError("allreduce: ranks " + RanksWhere(oks, 0) +
                                " could not read their peers' buffers (process_vm_readv)");
  }
  return Status::OK();
}

}  // namespace mxhorovod
