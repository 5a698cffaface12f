#include "executor.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "ops/adasum.h"
#include "ops/mpi_wait.h"
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

// Whether any two of the arrays the group writes or reads overlap in memory (outputs, and
// the inputs of out-of-place entries, which are copied into the outputs first).
bool SharesMemory(const std::vector<TensorTableEntry*>& entries, int esize) {
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (auto* e : entries) {
    const uintptr_t bytes = (uintptr_t)(e->input.num_elements() * esize);
    const uintptr_t out = (uintptr_t)e->output.data, in = (uintptr_t)e->input.data;
    ranges.push_back({out, out + bytes});
    if (in != out) ranges.push_back({in, in + bytes});
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) return true;
  }
  return false;
}

// A backend's failure, prefixed with the collective and the tensors it was running.
Status NameTensors(const Status& s, OpType op, const std::vector<TensorTableEntry*>& entries) {
  if (s.ok() || entries.empty()) return s;
  std::string what = std::string(OpTypeName(op)) + " '" + entries[0]->request.name + "'";
  if (s.reason().compare(0, what.size(), what) == 0) return s;  // named already
  if (entries.size() > 1) what += " (and " + std::to_string(entries.size() - 1) + " more)";
  const std::string m = what + ": " + s.reason();
  switch (s.code()) {
    case Status::kInvalidArgument: return Status::InvalidArgument(m);
    case Status::kPrecondition: return Status::PreconditionError(m);
    case Status::kAborted: return Status::Aborted(m);
    default: return Status::UnknownError(m);
  }
}

}  // namespace

int64_t ReducescatterRows(int64_t rows, int size, int rank) {
  return rows / size + (rank < rows % size ? 1 : 0);
}

Status Executor::Run(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  Status s;
  if (!entries.empty()) {  // for the error of a transfer between hosts past its bound
    std::string what = std::string(OpTypeName(resp.op_type)) + " '" + entries[0]->request.name + "'";
    if (entries.size() > 1) what += " (and " + std::to_string(entries.size() - 1) + " more)";
    SetCurrentCollective(what);
  }
  switch (resp.op_type) {
    case OpType::kAllreduce: s = Allreduce(resp, entries); break;
    case OpType::kBroadcast: s = Broadcast(resp, entries[0]); break;
    case OpType::kAllgather: s = Allgather(resp, resp.first_dims, entries[0]); break;
    case OpType::kAlltoall: s = Alltoall(entries[0]); break;
    case OpType::kReducescatter: s = Reducescatter(resp, entries); break;
    default: s = Status::UnknownError("unknown collective");
  }
  SetCurrentCollective("");
  return NameTensors(s, resp.op_type, entries);
}

Status Executor::Allreduce(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  if (resp.reduce_op == ReduceOp::kAdasum) return AllreduceAdasum(resp, entries);
  const DataType dt = resp.dtype;
  const int esize = DTypeSize(dt);
  const double post = resp.postscale;
  const int divisor = resp.reduce_op == ReduceOp::kAverage ? size_ : 1;
  if (entries.size() == 1) {
    // Alone in its group: reduce in the output itself, no fusion-buffer copies; the
    // backend may apply postscale / divisor inside the reduction, saving a pass.
    TensorTableEntry* e = entries[0];
    const int64_t n = e->input.num_elements();
    ScaleCopy(e->output.data, e->input.data, n, dt, resp.prescale);
    bool scaled = false;
    Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kAllreduce));  // [timeline]
    auto s = backend_->Allreduce(e->output.data, n, dt, resp.reduce_op, post / divisor, &scaled);
    Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
    if (!s.ok()) return s;
    if (!scaled) ScaleBuffer(e->output.data, n, dt, post, divisor);
    return Status::OK();
  }
  int64_t total = 0;
  for (auto* e : entries) total += e->input.num_elements();
  const int64_t in_place = backend_->InPlaceMinBytes();
  if (in_place >= 0 && total * esize >= in_place) return AllreduceInPlace(resp, entries, total);
  Timeline& timeline = Timeline::Get();
  if ((int64_t)fusion_buffer_.size() < total * esize) fusion_buffer_.resize(total * esize);
  char* buf = fusion_buffer_.data();
  // The scale factors ride on the pack and unpack copies: no extra pass over the buffer.
  timeline.ActivityStartAll(entries, kActivityMemcpyIn);  // [timeline]
  int64_t off = 0;
  for (auto* e : entries) {
    const int64_t n = e->input.num_elements();
    ScaleCopy(buf + off, e->input.data, n, dt, resp.prescale);
    off += n * esize;
  }
  timeline.ActivityEndAll(entries);                                          // [timeline]
  timeline.ActivityStartAll(entries, MPIActivityName(OpType::kAllreduce));  // [timeline]
  // Not scaled by the backend: the unpack copy below carries the scale at no extra pass.
  bool scaled = false;
  auto s = backend_->Allreduce(buf, total, dt, resp.reduce_op, 1.0, &scaled);
  timeline.ActivityEndAll(entries);                                          // [timeline]
  if (!s.ok()) return s;
  timeline.ActivityStartAll(entries, kActivityMemcpyOut);  // [timeline]
  off = 0;
  for (auto* e : entries) {
    const int64_t n = e->input.num_elements();
    ScaleCopy(e->output.data, buf + off, n, dt, post, divisor);
    off += n * esize;
  }
  timeline.ActivityEndAll(entries);  // [timeline]
  return Status::OK();
}

// Adasum (ops/adasum.h): a group is packed into the fusion buffer and crosses in one
// transfer per level of the tree, but each tensor keeps its own dot product and norms (a
// segment per tensor). Prescale and postscale are refused at the call (they are 1 here).
Status Executor::AllreduceAdasum(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  const DataType dt = resp.dtype;
  const int esize = DTypeSize(dt);
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (auto* e : entries) {
    counts.push_back(e->input.num_elements());
    total += counts.back();
  }
  Timeline& timeline = Timeline::Get();
  if (entries.size() == 1) {  // reduced in the output itself
    TensorTableEntry* e = entries[0];
    if (e->output.data != e->input.data) std::memcpy(e->output.data, e->input.data, total * esize);
    timeline.ActivityStart(e->request.name, MPIActivityName(OpType::kAllreduce));  // [timeline]
    auto s = AdasumAllreduce(backend_, e->output.data, counts, dt, rank_, size_, &adasum_peer_);
    timeline.ActivityEnd(e->request.name);  // [timeline]
    return s;
  }
  if ((int64_t)fusion_buffer_.size() < total * esize) fusion_buffer_.resize(total * esize);
  char* buf = fusion_buffer_.data();
  timeline.ActivityStartAll(entries, kActivityMemcpyIn);  // [timeline]
  int64_t off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(buf + off, entries[i]->input.data, counts[i] * esize);
    off += counts[i] * esize;
  }
  timeline.ActivityEndAll(entries);                                          // [timeline]
  timeline.ActivityStartAll(entries, MPIActivityName(OpType::kAllreduce));  // [timeline]
  auto s = AdasumAllreduce(backend_, buf, counts, dt, rank_, size_, &adasum_peer_);
  timeline.ActivityEndAll(entries);                                          // [timeline]
  if (!s.ok()) return s;
  timeline.ActivityStartAll(entries, kActivityMemcpyOut);  // [timeline]
  off = 0;
  for (size_t i = 0; i < entries.size(); ++i) {
    std::memcpy(entries[i]->output.data, buf + off, counts[i] * esize);
    off += counts[i] * esize;
  }
  timeline.ActivityEndAll(entries);  // [timeline]
  return Status::OK();
}

// A group reduced where its tensors are, by a backend that can (Backend::InPlaceMinBytes):
// no fusion-buffer copies. Unless two of the group's arrays share memory (MXNet arrays made
// over one buffer): reduced in place, each block owner would read and write both at once
// (wrong numbers). Then the group is packed into slices of the fusion buffer, given to the
// backend as the same number of buffers of the same sizes, so every rank makes the same
// calls whichever way it chose, and each array gets the reduction of its own values.
Status Executor::AllreduceInPlace(const Response& resp, const std::vector<TensorTableEntry*>& entries,
                                  int64_t total) {
  const DataType dt = resp.dtype;
  const int esize = DTypeSize(dt);
  const double post = resp.postscale;
  const int divisor = resp.reduce_op == ReduceOp::kAverage ? size_ : 1;
  const bool pack = SharesMemory(entries, esize);
  if (pack && (int64_t)fusion_buffer_.size() < total * esize) fusion_buffer_.resize(total * esize);
  std::vector<void*> bufs;
  std::vector<int64_t> counts;
  int64_t off = 0;
  for (auto* e : entries) {
    const int64_t n = e->input.num_elements();
    void* dst = pack ? fusion_buffer_.data() + off : e->output.data;
    ScaleCopy(dst, e->input.data, n, dt, resp.prescale);
    bufs.push_back(dst);
    counts.push_back(n);
    off += n * esize;
  }
  bool scaled = false;
  // A tensor whose buffer the backend reports final completes at once, while the rest of
  // the group is reduced (between hosts: its slices have crossed): unless packed (its
  // result is still to be copied out) or still to be scaled here. Its callback is then
  // gone, nothing below touches it, and its timeline row ends here.
  // `is_final`: whether a reported buffer holds the result: always when there is nothing to
  // scale, else when the backend scales (it sets *scaled before its first report). Two
  // captures keep the std::function inline: no allocation per group.
  static const bool kAlways = true;
  const bool* is_final = post == 1.0 && divisor == 1 ? &kAlways : &scaled;
  BufferDone done;
  if (!pack) {
    done = [&entries, is_final](size_t i) {
      TensorTableEntry* e = entries[i];
      if (!*is_final || !e->callback) return;
      StatusCallback callback = std::move(e->callback);
      e->callback = nullptr;
      Timeline::Get().OpEnd(e->request.name);  // [timeline]
      callback(Status::OK());
    };
  }
  Timeline& timeline = Timeline::Get();
  timeline.ActivityStartAll(entries, MPIActivityName(OpType::kAllreduce));  // [timeline]
  auto s = backend_->AllreduceBuffers(bufs, counts, dt, resp.reduce_op, post / divisor, &scaled,
                                      done);
  timeline.ActivityEndAll(entries);                                          // [timeline]
  if (!s.ok()) return s;
  for (size_t i = 0; i < entries.size(); ++i) {
    if (!entries[i]->callback) continue;  // completed early (above)
    if (pack) {
      ScaleCopy(entries[i]->output.data, bufs[i], counts[i], dt, scaled ? 1.0 : post,
                scaled ? 1 : divisor);
    } else if (!scaled) {
      ScaleBuffer(bufs[i], counts[i], dt, post, divisor);
    }
  }
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
  const int64_t row_bytes = RowElements(e->request.shape) * DTypeSize(resp.dtype);
  std::vector<int64_t> recv_bytes(size_);
  int64_t total_rows = 0;
  for (int r = 0; r < size_; ++r) {
    recv_bytes[r] = first_dims[r] * row_bytes;
    total_rows += first_dims[r];
  }
  const int64_t want = total_rows * RowElements(e->request.shape);
  if (e->output.num_elements() != want) return Status::InvalidArgument(OutputSizeError(e, want));
  Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kAllgather));  // [timeline]
  auto s = backend_->Allgatherv(e->input.data, recv_bytes[rank_], e->output.data, recv_bytes);
  Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
  return s;
}

Status Executor::Alltoall(TensorTableEntry* e) {
  const int64_t row = RowElements(e->request.shape);
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

// Rank r receives rows [first_r, first_r + rows_r) of the reduction, rows_r from
// ReducescatterRows. A group is packed rank-major (rank r's blocks of every tensor, then
// rank r+1's), so one MPI_Reduce_scatter serves all of them.
Status Executor::Reducescatter(const Response& resp, const std::vector<TensorTableEntry*>& entries) {
  const DataType dt = resp.dtype;
  const int esize = DTypeSize(dt);
  const int divisor = resp.reduce_op == ReduceOp::kAverage ? size_ : 1;
  std::vector<int64_t> counts(size_, 0);
  for (auto* e : entries) {
    const int64_t rows = e->request.shape.empty() ? 0 : e->request.shape[0];
    const int64_t row = RowElements(e->request.shape);
    const int64_t want = ReducescatterRows(rows, size_, rank_) * row;
    if (e->output.num_elements() != want) return Status::InvalidArgument(OutputSizeError(e, want));
    for (int r = 0; r < size_; ++r) counts[r] += ReducescatterRows(rows, size_, r) * row;
  }
  if (entries.size() == 1 && resp.prescale == 1.0) {
    // Straight from the input into the output: no copies.
    TensorTableEntry* e = entries[0];
    Timeline::Get().ActivityStart(e->request.name, MPIActivityName(OpType::kReducescatter));  // [timeline]
    auto s = backend_->Reducescatter(e->input.data, e->output.data, counts, dt, resp.reduce_op);
    Timeline::Get().ActivityEnd(e->request.name);  // [timeline]
    if (!s.ok()) return s;
    ScaleBuffer(e->output.data, counts[rank_], dt, resp.postscale, divisor);
    return Status::OK();
  }
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  if ((int64_t)fusion_buffer_.size() < total * esize) fusion_buffer_.resize(total * esize);
  if ((int64_t)scatter_out_.size() < counts[rank_] * esize) scatter_out_.resize(counts[rank_] * esize);
  char* buf = fusion_buffer_.data();
  Timeline& timeline = Timeline::Get();
  timeline.ActivityStartAll(entries, kActivityMemcpyIn);  // [timeline]
  int64_t off = 0;
  for (int r = 0; r < size_; ++r) {
    for (auto* e : entries) {
      const int64_t rows = e->request.shape[0];
      const int64_t row_bytes = RowElements(e->request.shape) * esize;
      int64_t first = 0;
      for (int q = 0; q < r; ++q) first += ReducescatterRows(rows, size_, q);
      const int64_t bytes = ReducescatterRows(rows, size_, r) * row_bytes;
      ScaleCopy(buf + off, static_cast<const char*>(e->input.data) + first * row_bytes,
                bytes / esize, dt, resp.prescale);
      off += bytes;
    }
  }
  timeline.ActivityEndAll(entries);                                              // [timeline]
  timeline.ActivityStartAll(entries, MPIActivityName(OpType::kReducescatter));  // [timeline]
  auto s = backend_->Reducescatter(buf, scatter_out_.data(), counts, dt, resp.reduce_op);
  timeline.ActivityEndAll(entries);                                              // [timeline]
  if (!s.ok()) return s;
  timeline.ActivityStartAll(entries, kActivityMemcpyOut);  // [timeline]
  off = 0;
  for (auto* e : entries) {
    const int64_t n = e->output.num_elements();
    ScaleCopy(e->output.data, scatter_out_.data() + off, n, dt, resp.postscale, divisor);
    off += n * esize;
  }
  timeline.ActivityEndAll(entries);  // [timeline]
  return Status::OK();
}

}  // namespace mxhorovod
