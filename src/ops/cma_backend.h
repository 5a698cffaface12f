// Allreduce through cross-memory attach (Linux process_vm_readv) when every rank of the
// communicator runs on this host: each rank reads its peers' buffers directly, with no
// staging copy through shared-memory cells as MPI's shared-memory transport makes.
//   1. The ranks exchange their buffers' addresses (one small allgather).
//   2. Reduce-scatter: rank r owns block r of the buffer (an even split of the elements)
//      and reduces every peer's block r into its own, reading it piecewise into a small
//      cache-resident scratch buffer and combining with the MPI op of the MPI backend
//      (MPI_Reduce_local), so every dtype and op gives what the MPI path gives.
//   3. A barrier, then allgather: rank r reads block q of rank q's buffer into its own.
//   4. A last collective (an allreduce of the ranks' error flags, which is also the barrier
//      that keeps every buffer alive until the peers have read it).
// A peer whose buffers all lie in shared regions (ops/shared_regions.h: DistributedTrainer's
// buckets) that this rank could map is read through the mapping with plain loads in steps 2
// and 3 instead (each rank chooses per peer; the collectives are the same), plus one more
// small allgather per call (the regions) when some rank's buffers all lie in regions.
// A rank whose buffers do not all lie in regions (arrays MXNet allocated), in a group of two
// or more holding 64 KiB to 256 MiB, stages for its peers instead: before the exchange it
// copies every block but its own into a shared staging region of its own (at the block's
// offset in the concatenation), and each piece of its own block once reduced; the region
// travels in the address exchange, and a peer that maps it reads from it in steps 2 and 3.
// Those copies cost less than the peers' process_vm_readv of a group's many pieces (each
// one pinned apart), not of one large buffer (cma_backend.cc, kStageMinBuffers).
// Every element is reduced once, by the owner of its block, so all ranks hold the same bits.
// Memory traffic per rank is reading the p blocks of its own (p x n/p), writing its block,
// and copying p - 1 blocks in: on 2 ranks over ResNet-50's 102 MB, 32 vs 54 ms for 4 MiB
// slices of MPI_Allreduce (prototype, this machine). Other collectives, and allreduces
// under min_bytes, go to the MPI backend.
// Availability is decided once per communicator (Create, collective): every rank must
// read a token from every peer's memory (same host, same PID namespace, ptrace permission:
// same user, or CAP_SYS_PTRACE; Yama's restriction is lifted for this process with
// PR_SET_PTRACER as Open MPI's CMA transport does), and every rank must have it enabled.
#ifndef MXHOROVOD_OPS_CMA_BACKEND_H_
#define MXHOROVOD_OPS_CMA_BACKEND_H_

#include <mpi.h>
#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "ops/mpi_backend.h"
#include "ops/shared_regions.h"

namespace mxhorovod {

class CMABackend : public MPIAllreduceOverlay {
 public:
  // Collective over comm. `enabled`: this rank's MXHOROVOD_CMA; `min_bytes`: this rank's
  // MXHOROVOD_CMA_MIN_BYTES (the job uses the largest of the ranks' values, so all ranks
  // take the same path for a buffer). Returns nullptr when some rank cannot use it, with
  // the reason (naming the ranks) in *why. flat must outlive the result.
  // job_ranks[r]: the job's rank of rank r of comm (for the messages).
  static std::unique_ptr<CMABackend> Create(MPIBackend* flat, MPI_Comm comm,
                                            const std::vector<int>& job_ranks, bool enabled,
                                            int64_t min_bytes, std::string* why);
  const char* name() const override { return "CMA"; }
  int64_t min_bytes() const { return min_bytes_; }
  // Under min_bytes: the MPI backend's; else AllreduceBuffers of the one buffer.
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                   bool* scaled) override;
  int64_t InPlaceMinBytes() const override { return min_bytes_; }
  // The steps above over the concatenation of bufs (blocks may span buffers), each buffer
  // read and written where it is: one address exchange and two barriers per group.
  // Reports no buffer early (`done` unused): every block is final only after the last
  // exchange.
  Status AllreduceBuffers(const std::vector<void*>& bufs, const std::vector<int64_t>& counts,
                          DataType dtype, ReduceOp op, double scale, bool* scaled,
                          const BufferDone& done) override;

 private:
  CMABackend(MPIBackend* flat, MPI_Comm comm, std::vector<int> job_ranks, std::vector<pid_t> pids,
             int64_t min_bytes);
 public:
  ~CMABackend() override;

 private:
  // One copy from a peer: bytes at its address `remote` into `local`.
  struct Copy {
    char* local;
    uint64_t remote;
    int64_t bytes;
  };
  // Reads the copies from the peer (one process_vm_readv for up to IOV_MAX of them); an
  // error names the peer.
  Status Read(int peer, const std::vector<Copy>& copies) const;
  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<int> job_ranks_;  // by rank of comm
  std::vector<pid_t> pids_;      // by rank of comm
  int64_t min_bytes_;
  std::vector<char> scratch_;  // one piece of a peer's block, kept in cache
  std::vector<Copy> copies_;   // reused between calls
  PeerMappings peer_mappings_;  // peers' shared regions (their buckets), mapped once
  // This rank's staging region (shared_regions.h) for groups of buffers MXNet allocated:
  // the parts its peers read are copied there so that they read with plain loads through
  // a mapping, not by process_vm_readv. Grown on demand, up to kMaxStageBytes.
  // Returns nullptr (the peers read the buffers by process_vm_readv) when none can be had.
  char* Stage(int64_t bytes);
  char* stage_ = nullptr;
  int64_t stage_bytes_ = 0;
  SharedRef stage_ref_;
  int64_t stage_failed_bytes_ = 0;  // a region this large could not be had: not tried again
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_CMA_BACKEND_H_
