// Hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE=1): on hosts with several ranks,
// most of the bytes of a flat allreduce cross the network several times. Here each host
// first reduces onto its local rank 0 (over the local communicator: shared memory), the
// local roots allreduce among themselves (the cross communicator of local rank 0: one
// rank per host on the network), and each local root broadcasts the result to its host.
// Both communicators come from the host-name grouping of the topology. Every other
// collective goes to the flat backend. Sliced like the flat backend (slice_bytes per call)
// and pipelined: slice k is reduced within the host while slice k-1 crosses between hosts
// and slice k-2 is broadcast, so the link is kept busy while the host reduces. The default
// when the job spans several hosts with several ranks on one (startup.h).
#ifndef MXHOROVOD_OPS_MPI_HIERARCHICAL_H_
#define MXHOROVOD_OPS_MPI_HIERARCHICAL_H_

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "ops/mpi_backend.h"

namespace mxhorovod {

class MPIHierarchicalBackend : public MPIAllreduceOverlay {
 public:
  // flat: used for its MPI types and ops and for every collective but allreduce; must
  // outlive this. local: the ranks of this host; cross: the ranks with this local rank,
  // one per host (used only on local rank 0). Neither is freed here.
  // slice_bytes: per call on one host; link_slice_bytes: per call when the job spans hosts.
  MPIHierarchicalBackend(MPIBackend* flat, MPI_Comm local, MPI_Comm cross, int64_t slice_bytes,
                         int64_t link_slice_bytes);
  const char* name() const override { return "MPI hierarchical"; }
  // Never scales (*scaled = false): the executor does.
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                   bool* scaled) override;
  // Between hosts, a group of tensors goes through the pipeline where it lies: a slice
  // within one tensor is reduced there; a slice across tensors is packed into a staging
  // slot as it enters the pipeline and unpacked as it leaves, so these copies overlap the
  // transfers of other slices. The fusion buffer's pack of the whole group before the
  // first byte crosses, and its unpack after the last, had left the link idle (ResNet-50's
  // gradients on 2 hosts x 2 ranks). On one host: -1 (the executor packs, as before).
  // done(i) as soon as the slices that hold buffer i have left the pipeline, so that its
  // tensor completes (and the work that waits on it, a cast back, an optimizer update,
  // runs) while later slices cross.
  int64_t InPlaceMinBytes() const override { return flat_->spans_hosts() ? 0 : -1; }
  Status AllreduceBuffers(const std::vector<void*>& bufs, const std::vector<int64_t>& counts,
                          DataType dtype, ReduceOp op, double scale, bool* scaled,
                          const BufferDone& done) override;
  void set_slice_bytes(int64_t bytes) { slice_bytes_ = bytes > 0 ? bytes : slice_bytes_; }

 private:
  // Allreduce of n elements at p among the local roots when there are more than 2 hosts: a
  // ring on MPI point-to-point calls (reduce-scatter, then allgather), so that each host
  // sends 2(h-1)/h of the bytes, the least any allreduce can; MPICH's own allreduce for 3
  // ranks sent twice the payload from one host. Each wait names the peer host it waits on.
  // `during` (may be empty) runs once, while the first step's transfers are under way:
  // the pipeline's copies and scaling of other slices, which the link waited for when
  // they ran between rings (ResNet-50 on 3 x 1 rank: about 3.5 ms per 6 MiB slice). It
  // should drive MPI between its chunks of work (an MPI_Iprobe), or the link may idle.
  Status RingAcross(char* p, int n, int esize, MPI_Datatype type, MPI_Op op,
                    const std::function<void()>& during);
  MPI_Comm local_, cross_;
  int local_rank_ = 0, local_size_ = 1, cross_size_ = 1, cross_rank_ = 0;
  int hosts_ = 1;  // the job's hosts: local rank 0's cross_size_, known on every rank
  std::vector<std::string> cross_hosts_;  // host of each rank of cross_
  std::vector<char> ring_tmp_;            // one received block of RingAcross
  std::vector<char> staging_;             // AllreduceBuffers' slots for slices across tensors
  int64_t slice_bytes_;
  int64_t link_slice_bytes_;
};

// Collective over comm (every rank calls it at start-up): OK when every rank has the same
// HOROVOD_HIERARCHICAL_ALLREDUCE setting, else an error listing the ranks on each side
// (ranks that disagree would call different collectives and hang).
Status AgreeOnHierarchical(MPI_Comm comm, bool mine);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_MPI_HIERARCHICAL_H_
