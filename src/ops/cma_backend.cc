#include "ops/cma_backend.h"

#include <sys/prctl.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <string>

#include "ops/concatenation.h"
#include "ops/mpi_wait.h"
#include "ops/shared_regions.h"

namespace mxhorovod {
namespace {

constexpr int64_t kScratchBytes = 256 << 10;  // a piece of a peer's block: fits in L2
constexpr size_t kMaxIov = 1024;              // IOV_MAX: iovecs per process_vm_readv
// Groups staged for the peers (CMABackend::Stage): from this size (below, the copies' fixed
// costs are as large as process_vm_readv's) up to kMaxStageBytes (the region's memory is
// held as long as the backend; larger groups are read by process_vm_readv).
constexpr int64_t kStageMinBytes = 64 << 10;
// Only groups of several buffers: a peer reads one buffer by process_vm_readv in a few
// large pieces, about as fast as the staging copies cost (a 64 MiB tensor on 2 ranks: 17.3
// ms read directly, 20.4 ms staged); a group of many, often small, gradients costs it a
// pinned range per piece of each buffer (ResNet-50's 193 through DistributedTrainer: 30.2
// ms staged against 36.2 ms, mean of 4 alternated runs; docs/benchmark_runs.md).
constexpr size_t kStageMinBuffers = 2;
constexpr int64_t kMaxStageBytes = int64_t(256) << 20;

// The wait policy of the data plane (mpi_wait.h): MPI's blocking call, or the nonblocking
// one waited on with yield-then-sleep. These handshakes are small: with a doorbell on every
// rank, the nonblocking call always (a rank ahead of its peer sleeps until the peer rings,
// where MPICH's blocking call would poll and yield, taking CPU from its model's threads).
bool Blocking() { return GetWaitPolicy().blocking_data && !DoorbellEverywhere(); }

Status Barrier(MPI_Comm comm) {
  if (Blocking()) return CheckMPI(MPI_Barrier(comm), "MPI_Barrier");
  MPI_Request req;
  auto s = CheckMPI(MPI_Ibarrier(comm, &req), "MPI_Ibarrier");
  return s.ok() ? WaitRequest(&req, "MPI_Ibarrier", WaitFor::kSmall) : s;
}

Status AllgatherBytes(const void* mine, int bytes, void* all, MPI_Comm comm) {
  if (Blocking()) {
    return CheckMPI(MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm), "MPI_Allgather");
  }
  MPI_Request req;
  auto s = CheckMPI(MPI_Iallgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, comm, &req),
                 "MPI_Iallgather");
  return s.ok() ? WaitRequest(&req, "MPI_Iallgather", WaitFor::kSmall) : s;
}

// The job's ranks (ranks[r] for rank r of the communicator) whose flag is `want`.
std::string RanksWhere(const std::vector<int>& flags, int want, const std::vector<int>& ranks) {
  std::string out;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] == want) out += (out.empty() ? "" : ", ") + std::to_string(ranks[r]);
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

std::unique_ptr<CMABackend> CMABackend::Create(MPIBackend* flat, MPI_Comm comm,
                                               const std::vector<int>& job_ranks, bool enabled,
                                               int64_t min_bytes, std::string* why) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  if ((int)job_ranks.size() != size) {  // not given: the communicator's own numbering
    std::vector<int> same(size);
    for (int r = 0; r < size; ++r) same[r] = r;
    return Create(flat, comm, same, enabled, min_bytes, why);
  }
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
  auto s = CheckMPI(MPI_Allgather(&mine, sizeof(Probe), MPI_BYTE, all.data(), sizeof(Probe), MPI_BYTE, comm),
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
  s = CheckMPI(MPI_Allgather(&ok, 1, MPI_INT, oks.data(), 1, MPI_INT, comm), "MPI_Allgather");
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
    *why = "MXHOROVOD_CMA=0 on ranks " + RanksWhere(off, 0, job_ranks);
    return nullptr;
  }
  if (std::find(here.begin(), here.end(), 0) != here.end()) {
    *why = "ranks " + RanksWhere(here, 0, job_ranks) + " run on other hosts than rank " +
           std::to_string(job_ranks[0]) + " (" + all[0].host + ")";
    return nullptr;
  }
  if (std::find(oks.begin(), oks.end(), 0) != oks.end()) {
    *why = "ranks " + RanksWhere(oks, 0, job_ranks) + " cannot read their peers' memory (process_vm_readv" +
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
  return std::unique_ptr<CMABackend>(new CMABackend(flat, comm, job_ranks, std::move(pids), job_min));
}

CMABackend::CMABackend(MPIBackend* flat, MPI_Comm comm, std::vector<int> job_ranks,
                       std::vector<pid_t> pids, int64_t min_bytes)
    : MPIAllreduceOverlay(flat),
      comm_(comm),
      job_ranks_(std::move(job_ranks)),
      pids_(std::move(pids)),
      min_bytes_(min_bytes),
      scratch_(kScratchBytes) {
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &size_);
}

CMABackend::~CMABackend() {
  if (stage_) FreeSharedRegion(stage_);
}

char* CMABackend::Stage(int64_t bytes) {
  if (bytes <= stage_bytes_) return stage_;
  if (bytes > kMaxStageBytes || (stage_failed_bytes_ > 0 && bytes >= stage_failed_bytes_)) return nullptr;
  // Doubling, in whole MiB: a few regions over a job's life (a peer's mapping of an old one
  // is dropped after PeerMappings' idle calls). The new region first: the old one stays if
  // no new one can be had (and no region of that size is asked for again).
  const int64_t mib = int64_t(1) << 20;
  int64_t want = std::min(kMaxStageBytes, std::max(bytes, 2 * stage_bytes_));
  want = (want + mib - 1) / mib * mib;
  std::string why;
  char* p = static_cast<char*>(AllocSharedRegion(want, &why, "mxhorovod-staging"));
  std::vector<SharedRef> refs;
  if (!p || FindSharedRegions({p}, {want}, &refs) != 1) {
    if (p) FreeSharedRegion(p);
    stage_failed_bytes_ = bytes;
    return nullptr;
  }
  if (stage_) FreeSharedRegion(stage_);
  stage_ = p;
  stage_bytes_ = want;
  stage_ref_ = refs[0];
  return stage_;
}

Status CMABackend::Read(int peer, const std::vector<Copy>& copies) const {
  std::vector<iovec> local, remote;
  for (size_t at = 0; at < copies.size(); at += kMaxIov) {
    const size_t end = std::min(copies.size(), at + kMaxIov);
    local.clear();
    remote.clear();
    int64_t want = 0;
    for (size_t i = at; i < end; ++i) {
      local.push_back({copies[i].local, (size_t)copies[i].bytes});
      remote.push_back({(void*)(uintptr_t)copies[i].remote, (size_t)copies[i].bytes});
      want += copies[i].bytes;
    }
    ssize_t n = process_vm_readv(pids_[peer], local.data(), local.size(), remote.data(),
                                 remote.size(), 0);
    if (n == want) continue;
    // Short (the kernel stops at a failing piece): each piece alone, to finish or to say why.
    for (size_t i = at; i < end; ++i) {
      char* dst = copies[i].local;
      uint64_t src = copies[i].remote;
      for (int64_t left = copies[i].bytes; left > 0;) {
        iovec l{dst, (size_t)left}, r{(void*)(uintptr_t)src, (size_t)left};
        ssize_t got = process_vm_readv(pids_[peer], &l, 1, &r, 1, 0);
        if (got <= 0) {
          return Status::UnknownError("reading rank " + std::to_string(job_ranks_[peer]) +
                                      "'s buffer (process_vm_readv) failed: " +
                                      (got < 0 ? std::strerror(errno) : "no bytes read"));
        }
        dst += got;
        src += got;
        left -= got;
      }
    }
  }
  return Status::OK();
}

Status CMABackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                             bool* scaled) {
  if (count * DTypeSize(dtype) < min_bytes_) {
    return flat_->Allreduce(buf, count, dtype, op, scale, scaled);
  }
  return AllreduceBuffers({buf}, {count}, dtype, op, scale, scaled, {});
}

Status CMABackend::AllreduceBuffers(const std::vector<void*>& bufs,
                                    const std::vector<int64_t>& counts, DataType dtype,
                                    ReduceOp op, double scale, bool* scaled,
                                    const BufferDone& /*done*/) {
  const int esize = DTypeSize(dtype);
  const MPI_Datatype type = flat_->Type(dtype);
  const MPI_Op mpi_op = flat_->ReductionOp(dtype, op, scale, scaled);
  const size_t k = bufs.size();
  // Every rank has the same counts, so blocks cut the same buffers everywhere.
  const Concatenation concat(counts);
  const int64_t total = concat.total();
  // Each rank's buffer addresses, and how many of its buffers lie in shared regions.
  std::vector<int64_t> nbytes(k);
  for (size_t i = 0; i < k; ++i) nbytes[i] = counts[i] * esize;
  std::vector<SharedRef> refs;
  const uint64_t shared = FindSharedRegions(bufs, nbytes, &refs);
  const int64_t lo = BlockStart(total, size_, rank_), hi = BlockStart(total, size_, rank_ + 1);
  // Buffers that are not all in shared regions: what the peers read of them (every block
  // but ours now, ours once reduced) goes to the staging region, at its offset in the
  // concatenation, before they can read it (before the exchange below; before the barrier).
  char* stage = k >= kStageMinBuffers && shared < k && size_ > 1 && total * esize >= kStageMinBytes
                    ? Stage(total * esize)
                    : nullptr;
  auto to_stage = [&](size_t i, int64_t off, int64_t n) {
    std::memcpy(stage + (concat.start(i) + off) * esize, static_cast<char*>(bufs[i]) + off * esize, n * esize);
  };
  if (stage) {
    concat.Walk(0, lo, to_stage);
    concat.Walk(hi, total, to_stage);
  }
  // Each rank's words: its buffers' addresses, how many of them lie in shared regions, and
  // its staging region (fd << 32 | id, 0 when not staged).
  const size_t w = k + 2;
  std::vector<uint64_t> mine(w), gathered(w * size_), addrs(k * size_);
  for (size_t i = 0; i < k; ++i) mine[i] = (uint64_t)(uintptr_t)bufs[i];
  mine[k] = shared;
  mine[k + 1] = stage ? (uint64_t)(uint32_t)stage_ref_.fd << 32 | stage_ref_.id : 0;
  auto s = AllgatherBytes(mine.data(), (int)(w * sizeof(uint64_t)), gathered.data(), comm_);
  if (!s.ok()) return s;
  // some_shared: the same answer on every rank; some_staged: whether a peer of this rank stages.
  bool some_shared = false, some_staged = false;
  for (int q = 0; q < size_; ++q) {
    std::copy(&gathered[q * w], &gathered[q * w + k], &addrs[q * k]);
    some_shared |= gathered[q * w + k] == k;
    some_staged |= q != rank_ && gathered[q * w + k + 1] != 0;
  }
  // mapped[q * k + i]: peer q's buffer i through our mapping of its region, for the peers
  // whose buffers all lie in shared regions that this rank could map (each rank decides
  // alone how it reads a peer: the results and the collectives are the same either way).
  std::vector<const char*> mapped(k * size_, nullptr);
  // staged[q]: byte 0 of peer q's staging region through our mapping (nullptr: none).
  std::vector<const char*> staged(size_, nullptr);
  if (some_shared || some_staged) peer_mappings_.Tick();
  for (int q = 0; q < size_ && some_staged; ++q) {
    const uint64_t tag = gathered[q * w + k + 1];
    if (q == rank_ || tag == 0) continue;
    staged[q] = peer_mappings_.Map(pids_[q], SharedRef{(int32_t)(tag >> 32), (uint32_t)tag, 0},
                                   (uint64_t)(total * esize));
  }
  if (some_shared) {
    std::vector<uint64_t> where(2 * k), all_where(2 * k * size_);
    for (size_t i = 0; i < k; ++i) {
      where[2 * i] = (uint64_t)(uint32_t)refs[i].fd << 32 | refs[i].id;
      where[2 * i + 1] = refs[i].offset;
    }
    s = AllgatherBytes(where.data(), (int)(2 * k * sizeof(uint64_t)), all_where.data(), comm_);
    if (!s.ok()) return s;
    for (int q = 0; q < size_; ++q) {
      if (q == rank_ || gathered[q * w + k] != k) continue;
      for (size_t i = 0; i < k; ++i) {
        const uint64_t tag = all_where[(q * k + i) * 2], offset = all_where[(q * k + i) * 2 + 1];
        SharedRef ref{(int32_t)(tag >> 32), (uint32_t)tag, offset};
        const char* base = peer_mappings_.Map(pids_[q], ref, offset + counts[i] * esize);
        if (!base) {
          std::fill(&mapped[q * k], &mapped[q * k + k], nullptr);
          break;
        }
        mapped[q * k + i] = base + offset;
      }
    }
  }
  // Whether peer q is read through a mapping (its staging region, or all its buffers), and
  // where its element `off` of buffer i then is.
  auto through_mapping = [&](int q) {
    return staged[q] != nullptr || (k > 0 && mapped[q * k + k - 1] != nullptr);
  };
  auto peer_at = [&](int q, size_t i, int64_t off) {
    return staged[q] ? staged[q] + (concat.start(i) + off) * esize : mapped[q * k + i] + off * esize;
  };
  // Reduce-scatter: this rank's block, piece by piece; each peer's piece read into the
  // scratch buffer and combined into ours.
  Status failed;
  const int64_t piece = kScratchBytes / esize;
  for (int64_t at = lo; at < hi && failed.ok(); at += piece) {
    const int64_t end = std::min(hi, at + piece);
    for (int j = 1; j < size_ && failed.ok(); ++j) {
      const int q = (rank_ + j) % size_;
      if (through_mapping(q)) {
        concat.Walk(at, end, [&](size_t i, int64_t off, int64_t n) {
          if (!failed.ok()) return;
          failed = CheckMPI(MPI_Reduce_local(peer_at(q, i, off),
                                             static_cast<char*>(bufs[i]) + off * esize, (int)n,
                                             type, mpi_op), "MPI_Reduce_local");
        });
        continue;
      }
      copies_.clear();
      char* dst = scratch_.data();
      concat.Walk(at, end, [&](size_t i, int64_t off, int64_t n) {
        copies_.push_back({dst, addrs[q * k + i] + off * esize, n * esize});
        dst += n * esize;
      });
      failed = Read(q, copies_);
      if (!failed.ok()) break;
      const char* src = scratch_.data();
      concat.Walk(at, end, [&](size_t i, int64_t off, int64_t n) {
        if (!failed.ok()) return;
        failed = CheckMPI(MPI_Reduce_local(src, static_cast<char*>(bufs[i]) + off * esize, (int)n,
                                        type, mpi_op), "MPI_Reduce_local");
        src += n * esize;
      });
    }
    if (stage && failed.ok()) concat.Walk(at, end, to_stage);  // the reduced piece, still in cache
  }
  s = Barrier(comm_);
  if (!s.ok()) return s;
  // Allgather: every other block from its owner, straight into our buffers.
  for (int j = 1; j < size_ && failed.ok(); ++j) {
    const int q = (rank_ + j) % size_;
    if (through_mapping(q)) {
      concat.Walk(BlockStart(total, size_, q), BlockStart(total, size_, q + 1),
           [&](size_t i, int64_t off, int64_t n) {
             std::memcpy(static_cast<char*>(bufs[i]) + off * esize, peer_at(q, i, off), n * esize);
           });
      continue;
    }
    copies_.clear();
    concat.Walk(BlockStart(total, size_, q), BlockStart(total, size_, q + 1),
         [&](size_t i, int64_t off, int64_t n) {
           copies_.push_back({static_cast<char*>(bufs[i]) + off * esize,
                              addrs[q * k + i] + off * esize, n * esize});
         });
    failed = Read(q, copies_);
  }
  // Everyone has read every block (our buffers may change once we return), and learns
  // whether every rank succeeded: a rank's failure leaves wrong bytes in all ranks' blocks.
  int ok = failed.ok() ? 1 : 0;
  std::vector<int> oks(size_);
  s = AllgatherBytes(&ok, sizeof(ok), oks.data(), comm_);
  if (!s.ok()) return s;
  if (!failed.ok()) return failed;
  if (std::find(oks.begin(), oks.end(), 0) != oks.end()) {
    return Status::UnknownError("ranks " + RanksWhere(oks, 0, job_ranks_) +
                                " could not read their peers' buffers (process_vm_readv)");
  }
  return Status::OK();
}

}  // namespace mxhorovod
