// Runs one planned group of a cycle: lays the tensors out (fusion buffer, in-place single
// tensors, per-rank blocks), applies prescale/postscale, calls the backend, copies back.
#ifndef MXHOROVOD_COMMON_EXECUTOR_H_
#define MXHOROVOD_COMMON_EXECUTOR_H_

#include <vector>

#include "common.h"
#include "ops/backend.h"

namespace mxhorovod {

class Executor {
 public:
  Executor(Backend* backend, int rank, int size) : backend_(backend), rank_(rank), size_(size) {}
  // entries[i] is the local entry of the i-th name of the group; all share resp's op and
  // parameters. first_dims (allgather) holds size entries per tensor, tensor-major.
  Status Run(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  size_t fusion_buffer_bytes() const { return fusion_buffer_.size(); }

 private:
  Status Allreduce(const Response& resp, const std::vector<TensorTableEntry*>& entries);
  Status Broadcast(const Response& resp, TensorTableEntry* e);
  Status Allgather(const Response& resp, const std::vector<int64_t>& first_dims, TensorTableEntry* e);
  Status Alltoall(TensorTableEntry* e);
  Backend* backend_;
  int rank_, size_;
  std::vector<char> fusion_buffer_;  // persistent; grows to the largest fused group
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_EXECUTOR_H_
