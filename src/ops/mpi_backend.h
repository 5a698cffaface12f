// The MPI transport (CPU): nonblocking MPI collectives on the library's own communicator,
// waited on with WaitRequest. Allreduce and broadcast go out in slices of at most
// slice_bytes per call: MPICH allocates a message-sized temporary per Allreduce, and from
// 32 MiB up glibc maps and unmaps it on every call (see DESIGN's traps).
#ifndef MXHOROVOD_OPS_MPI_BACKEND_H_
#define MXHOROVOD_OPS_MPI_BACKEND_H_

#include <mpi.h>

#include "ops/backend.h"
#include "ops/reduce_ops.h"

namespace mxhorovod {

class MPIBackend : public Backend {
 public:
  MPIBackend(MPI_Comm comm, int64_t slice_bytes);
  const char* name() const override { return "MPI"; }
  void set_slice_bytes(int64_t bytes) { slice_bytes_ = bytes > 0 ? bytes : slice_bytes_; }
  // Sum/Average of float16/float32/float64 use the library's own ops (ops/reduce_ops.h);
  // on a 2-rank communicator `scale` is applied inside the reduction (*scaled = true).
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                   bool* scaled) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  // The MPI datatype and op of a dtype (see ops/reduce_ops.h); also used by the
  // hierarchical backend, which shares them.
  MPI_Datatype Type(DataType t) const { return ops_.Type(t); }
  MPI_Op Op(DataType t, ReduceOp op) const { return ops_.Op(t, op); }
  // The op of an allreduce wanting its result times `scale`: on a 2-rank communicator a
  // float16/float32/float64 Sum or Average gets the scaled sum (*scaled = true), else
  // Op(dtype, op) (*scaled = false). Valid for the next reduction only (ReduceOps::ScaledSum).
  MPI_Op ReductionOp(DataType dtype, ReduceOp op, double scale, bool* scaled);

 private:
  MPI_Comm comm_;
  int size_ = 0;
  int64_t slice_bytes_;
  ReduceOps ops_;
};

// A backend that replaces MPI's allreduce only (hierarchical, cross-memory attach): every
// other collective goes to the flat MPI backend, which must outlive it.
class MPIAllreduceOverlay : public Backend {
 public:
  explicit MPIAllreduceOverlay(MPIBackend* flat) : flat_(flat) {}
  Status Broadcast(void* buf, int64_t bytes, int root) override {
    return flat_->Broadcast(buf, bytes, root);
  }
  Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override {
    return flat_->Allgatherv(send, send_bytes, recv, recv_bytes);
  }
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override {
    return flat_->Alltoallv(send, send_bytes, recv, recv_bytes);
  }
  Status Reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override {
    return flat_->Reducescatter(send, recv, recv_counts, dtype, op);
  }

 protected:
  MPIBackend* flat_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_MPI_BACKEND_H_
