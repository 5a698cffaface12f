// Runs one planned group of a cycle: lays the tensors out (fusion buffer, in-place single
// tensors, per-rank blocks), applies prescale/postscale, calls the backend, copies back.
#ifndef MXHOROVOD_COMMON_EXECUTOR_H_
#define MXHOROVOD_COMMON_EXECUTOR_H_

#include <vector>

#include "common.h"
#include "ops/backend.h"

namespace mxhorovod {

// Rows of a reducescatter's dimension 0 that `rank` receives: an even split, the lower
// ranks taking one more row each while the remainder lasts (Horovod's rule).
int64_t ReducescatterRows(int64_t rows, int size, int rank);

class Executor {
 public:
  Executor(Backend* backend, int rank, int size) : backend_(backend), rank_(rank), size_(size) {}
  // entries[i] is the local entry of the i-th name of the group; all share resp's op and
  // parameters. first_dims (allgather) holds size entries per tensor, tensor-major.
  Status Run(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  size_t fusion_buffer_bytes() const { return fusion_buffer_.size(); }
  // Allreduce groups of this many bytes or more are reduced in place, never packed (-1:
  // none; Backend::InPlaceMinBytes).
  int64_t in_place_min_bytes() const { return backend_->InPlaceMinBytes(); }

 private:
  Status Allreduce(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  Status AllreduceAdasum(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  Status AllreduceInPlace(const Response& resp, const std::vector<TensorTableEntry*>& entries,
                          int64_t total);
  Status Broadcast(const Response& resp, TensorTableEntry* e);
  Status Allgather(const Response& resp, const std::vector<int64_t>& first_dims, TensorTableEntry* e);
  Status Alltoall(TensorTableEntry* e);
  Status Reducescatter(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  Backend* backend_;
  int rank_, size_;
  std::vector<char> fusion_buffer_;  // persistent; grows to the largest fused group
  std::vector<char> scatter_out_;    // reducescatter of a group: this rank's fused block
  std::vector<char> adasum_peer_;    // Adasum: a partner's vector
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_EXECUTOR_H_
