// The data plane: one interface, one file per transport (MPI on CPU now; NCCL later).
// Each call moves bytes that the executor has already laid out; no negotiation here.
// All calls are made by the background thread only.
#ifndef MXHOROVOD_OPS_BACKEND_H_
#define MXHOROVOD_OPS_BACKEND_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/common.h"

namespace mxhorovod {

// AllreduceBuffers' report that buffer i of the group is final.
using BufferDone = std::function<void(size_t)>;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  // In place: buf holds this rank's count elements, and the reduction on return (Average:
  // the sum). The caller wants the result multiplied by `scale` (1: not at all): a backend
  // that can do that inside the reduction, at no extra pass and with the same result as
  // ScaleBuffer's (so never for integers, which ScaleBuffer divides exactly), does and
  // sets *scaled; otherwise *scaled is false and the caller scales.
  virtual Status Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op, double scale,
                           bool* scaled) = 0;
  // Several buffers of one dtype reduced as their concatenation, each in place, without
  // packing them into one buffer, by a backend that can (it reads the peers' memory): when
  // InPlaceMinBytes() >= 0 the executor calls AllreduceBuffers for every group of at least
  // that many bytes instead of packing it into the fusion buffer, and fusion planning puts
  // tensors of any size into groups. bufs[i] holds counts[i] elements; `scale` and *scaled
  // as in Allreduce. `done`, where the backend can and it is not empty: called as
  // done(i) once buffer i holds its result, scaled as *scaled says (set before the first
  // call), and the backend will not touch it again, so that its tensor can complete while
  // the rest of the group is still being reduced. Buffers not reported are done on return.
  virtual int64_t InPlaceMinBytes() const { return -1; }
  virtual Status AllreduceBuffers(const std::vector<void*>& /*bufs*/,
                                  const std::vector<int64_t>& /*counts*/, DataType /*dtype*/,
                                  ReduceOp /*op*/, double /*scale*/, bool* scaled,
                                  const BufferDone& /*done*/) {
    *scaled = false;
    return Status::UnknownError(std::string(name()) + ": no in-place group allreduce");
  }
  virtual Status Broadcast(void* buf, int64_t bytes, int root) = 0;
  // Point to point: sends send_bytes from `send` to rank `dest` while receiving recv_bytes
  // into `recv` from rank `source` (either side skipped when its rank is -1), then waits for
  // both. Adasum's tree (ops/adasum.h) is built on it and Broadcast.
  virtual Status Sendrecv(const void* /*send*/, int64_t /*send_bytes*/, int /*dest*/,
                          void* /*recv*/, int64_t /*recv_bytes*/, int /*source*/) {
    return Status::UnknownError(std::string(name()) + ": no point-to-point transfers");
  }
  // recv gets every rank's block in rank order; recv_bytes[r] is rank r's block size.
  virtual Status Allgatherv(const void* send, int64_t send_bytes, void* recv,
                            const std::vector<int64_t>& recv_bytes) = 0;
  // send_bytes[r] go to rank r (consecutive blocks); recv_bytes[r] come from rank r.
  virtual Status Alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                           void* recv, const std::vector<int64_t>& recv_bytes) = 0;
  // send holds sum(recv_counts) elements in rank blocks; recv gets this rank's block of the
  // reduction (recv_counts[rank] elements).
  virtual Status Reducescatter(const void* send, void* recv, const std::vector<int64_t>& recv_counts,
                               DataType dtype, ReduceOp op) = 0;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_BACKEND_H_
