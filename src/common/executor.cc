#include "executor.h"

#include <cstring>

#include "ops/scale.h"
#include "timeline.h"

namespace mxhorovod {
namespace {

int64_t RowElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (size_t i = 1; i < shape.size(); ++i) n *= shape[i];
  return n;
}

std::string OutputSizeError(const TensorTableEntry* e, int64_t want) {
  return std::string(OpTypeName(e->request.op_type)) + " '" + e->request.name +
         "': the output holds " + std::to_string(e->output.num_elements()) +
         " elements but the peers send " + std::to_string(want);
}

}  // namespace

Status Executor::Run(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  switch (resp.op_type) {
    case OpType::kAllreduce: return Allreduce(resp, entries);
    case OpType::kBroadcast: return Broadcast(resp, entries[0]);
    case OpType::kAllgather: return Allgather(resp, resp.first_dims, entries[0]);
    case OpType::kAlltoall: return Alltoall(entries[0]);
  }
  return Status::UnknownError("unknown collective");
}

Status Executor::Allreduce(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  const DataType dt = resp.dtype;
  const int esize = DTypeSize(dt);
  const double post = resp.postscale;
  const int divisor = resp.reduce_op == ReduceOp::kAverage ? size_ : 1;
  if (entries.size() == 1) {
    // Alone in its group: reduce in the output itself, no fusion-buffer copies.
    TensorTableEntry* e = entries[0];
    const int64_t n = e->input.num_elements();
    if (e->output.data != e->input.data) std::memcpy(e->output.data, e->input.data, n * esize);
    ScaleBuffer(e->output.data, n, dt, resp.prescale);
    Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kAllreduce));  // [timeline]
    auto s = backend_->Allreduce(e->output.data, n, dt, resp.reduce_op);
    Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
    if (!s.ok()) return s;
    ScaleBuffer(e->output.data, n, dt, post, divisor);
    return Status::OK();
  }
  int64_t total = 0;
  for (auto* e : entries) total += e->input.num_elements();
  if ((int64_t)fusion_buffer_.size() < total * esize) fusion_buffer_.resize(total * esize);
  char* buf = fusion_buffer_.data();
  Timeline& timeline = Timeline::Get();
  timeline.ActivityStartAll(entries, kActivityMemcpyIn);  // [timeline]
  int64_t off = 0;
  for (auto* e : entries) {
    const int64_t bytes = e->input.num_elements() * esize;
    std::memcpy(buf + off, e->input.data, bytes);
    off += bytes;
  }
  ScaleBuffer(buf, total, dt, resp.prescale);
  timeline.ActivityEndAll(entries);                                             // [timeline]
  timeline.ActivityStartAll(entries, MPIActivityName(OpType::kAllreduce));     // [timeline]
  auto s = backend_->Allreduce(buf, total, dt, resp.reduce_op);
  timeline.ActivityEndAll(entries);                                             // [timeline]
  if (!s.ok()) return s;
  timeline.ActivityStartAll(entries, kActivityMemcpyOut);  // [timeline]
  ScaleBuffer(buf, total, dt, post, divisor);
  off = 0;
  for (auto* e : entries) {
    const int64_t bytes = e->input.num_elements() * esize;
    std::memcpy(e->output.data, buf + off, bytes);
    off += bytes;
  }
  timeline.ActivityEndAll(entries);  // [timeline]
  return Status::OK();
}

Status Executor::Broadcast(const Response& resp, TensorTableEntry* e) {
  const int64_t bytes = e->input.num_elements() * DTypeSize(resp.dtype);
  if (rank_ == resp.root_rank && e->output.data != e->input.data) {
    std::memcpy(e->output.data, e->input.data, bytes);
  }
  Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kBroadcast));  // [timeline]
  auto s = backend_->Broadcast(e->output.data, bytes, resp.root_rank);
  Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
  return s;
}

Status Executor::Allgather(const Response& resp, const std::vector<int64_t>& first_dims,
                           TensorTableEntry* e) {
  const int64_t row_bytes = RowElements(e->input.shape) * DTypeSize(resp.dtype);
  std::vector<int64_t> recv_bytes(size_);
  int64_t total_rows = 0;
  for (int r = 0; r < size_; ++r) {
    recv_bytes[r] = first_dims[r] * row_bytes;
    total_rows += first_dims[r];
  }
  const int64_t want = total_rows * RowElements(e->input.shape);
  if (e->output.num_elements() != want) return Status::InvalidArgument(OutputSizeError(e, want));
  Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kAllgather));  // [timeline]
  auto s = backend_->Allgatherv(e->input.data, recv_bytes[rank_], e->output.data, recv_bytes);
  Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
  return s;
}

Status Executor::Alltoall(TensorTableEntry* e) {
  const int64_t row = RowElements(e->input.shape);
  const int64_t row_bytes = row * DTypeSize(e->request.dtype);
  std::vector<int64_t> send_bytes(size_), recv_bytes(size_);
  int64_t recv_rows = 0;
  for (int r = 0; r < size_; ++r) {
    send_bytes[r] = e->request.splits[r] * row_bytes;
    recv_bytes[r] = e->recv_splits[r] * row_bytes;
    recv_rows += e->recv_splits[r];
  }
  if (e->output.num_elements() != recv_rows * row) {
    return Status::InvalidArgument(OutputSizeError(e, recv_rows * row));
  }
  Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kAlltoall));  // [timeline]
  auto s = backend_->Alltoallv(e->input.data, send_bytes, e->output.data, recv_bytes);
  Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
  return s;
}

}  // namespace mxhorovod
