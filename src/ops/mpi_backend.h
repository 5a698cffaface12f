// The MPI transport (CPU): nonblocking MPI collectives on the library's own communicator,
// waited on with WaitRequest. Allreduce and broadcast go out in slices of at most
// slice_bytes per call: MPICH allocates a message-sized temporary per Allreduce, and from
// 32 MiB up glibc maps and unmaps it on every call (see DESIGN's traps).
#ifndef MXHOROVOD_OPS_MPI_BACKEND_H_
#define MXHOROVOD_OPS_MPI_BACKEND_H_

#include <mpi.h>

#include "ops/backend.h"

namespace mxhorovod {

class MPIBackend : public Backend {
 public:
  MPIBackend(MPI_Comm comm, int64_t slice_bytes);
  ~MPIBackend() override;
  const char* name() const override { return "MPI"; }
  void set_slice_bytes(int64_t bytes) { slice_bytes_ = bytes > 0 ? bytes : slice_bytes_; }
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                    const std::vector<int64_t>& recv_bytes) override;
  Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes, void* recv,
                   const std::vector<int64_t>& recv_bytes) override;
  Status Reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                       DataType dtype, ReduceOp op) override;
  // The MPI datatype and op of a dtype (float16: our own type and ops); also used by the
  // hierarchical backend, which shares them.
  MPI_Datatype Type(DataType t) const;
  MPI_Op Op(DataType t, ReduceOp op) const;

 private:
  MPI_Comm comm_;
  int64_t slice_bytes_;
  MPI_Datatype float16_ = MPI_DATATYPE_NULL;
  MPI_Op f16_sum_ = MPI_OP_NULL, f16_min_ = MPI_OP_NULL, f16_max_ = MPI_OP_NULL,
         f16_prod_ = MPI_OP_NULL;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_MPI_BACKEND_H_
