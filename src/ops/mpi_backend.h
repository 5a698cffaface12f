// The MPI transport (CPU): nonblocking MPI collectives on the library's own communicator,
// waited on with WaitRequest. On a communicator that spans hosts the data calls are waits
// between hosts (LinkWait: never asleep, bounded), and an allreduce keeps two slices in
// flight, so the link carries the next slice while MPI finishes the last one's steps. Allreduce and broadcast go out in slices of at most
// slice_bytes per call: MPICH allocates a message-sized temporary per Allreduce, and from
// 32 MiB up glibc maps and unmaps it on every call (see DESIGN's traps).
#ifndef MXHOROVOD_OPS_MPI_BACKEND_H_
#define MXHOROVOD_OPS_MPI_BACKEND_H_

#include <mpi.h>

#include <string>

#include "ops/backend.h"
#include "ops/mpi_wait.h"
#include "ops/reduce_ops.h"

namespace mxhorovod {

// Slices of one allreduce in flight at once between hosts.
constexpr int kLinkWindow = 2;

// Collective over `comm`: the hosts (by host name) of its ranks other than this one's, in
// rank order, "h2, h3" ("" when every rank is on this host); *ranks_here gets how many of
// its ranks are on this host.
std::string OtherHosts(MPI_Comm comm, int* ranks_here, int* hosts = nullptr);

class MPIBackend : public Backend {
 public:
  // slice_bytes: per call on one host; link_slice_bytes: per allreduce call when the
  // communicator spans hosts (smaller: the pipeline's slices on the link).
  MPIBackend(MPI_Comm comm, int64_t slice_bytes, int64_t link_slice_bytes);
  const char* name() const override { return "MPI"; }
  void set_slice_bytes(int64_t bytes) { slice_bytes_ = bytes > 0 ? bytes : slice_bytes_; }
  // Sum/Average of float16/float32/float64 use the library's own ops (ops/reduce_ops.h);
  // on a 2-rank communicator `scale` is applied inside the reduction (*scaled = true).
  Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                   bool* scaled) override;
  Status Broadcast(void* buf, int64_t bytes, int root) override;
  Status Sendrecv(const void* send, int64_t send_bytes, int dest, void* recv,
                  int64_t recv_bytes, int source) override;
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
  // Whether the communicator's ranks are on more than one host (by host name).
  bool spans_hosts() const { return !other_hosts_.empty(); }
  const std::string& other_hosts() const { return other_hosts_; }
  int hosts() const { return hosts_; }  // hosts the communicator spans

 private:
  // The bound of a data call moving `bytes` per rank between hosts (null on one host);
  // `pause`: LinkWait::pause.
  const LinkWait* Link(int64_t bytes, bool pause = true);
  MPI_Comm comm_;
  int size_ = 0;
  // The other hosts of the communicator ("h2, h3"; "" on one host), and how many of its
  // ranks share this host (they share its link).
  std::string other_hosts_;
  int ranks_here_ = 1;
  int hosts_ = 1;
  LinkWait link_;
  int64_t slice_bytes_;
  int64_t link_slice_bytes_;
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
  Status Sendrecv(const void* send, int64_t send_bytes, int dest, void* recv,
                  int64_t recv_bytes, int source) override {
    return flat_->Sendrecv(send, send_bytes, dest, recv, recv_bytes, source);
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
