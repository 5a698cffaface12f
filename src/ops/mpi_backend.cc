#include "ops/mpi_backend.h"

#include <climits>
#include <string>

#include "ops/mpi_wait.h"
#include "ops/scale.h"

namespace mxhorovod {
namespace {

template <ReduceOp OP>
void Float16Op(void* in, void* inout, int* len, MPI_Datatype*) {
  ReduceFloat16(in, inout, *len, OP);
}

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string("MPI error in ") + what + ": " + MPIErrorString(rc));
}

Status ToIntCounts(const std::vector<int64_t>& bytes, std::vector<int>* counts,
                   std::vector<int>* displs, const char* what) {
  counts->resize(bytes.size());
  displs->resize(bytes.size());
  int64_t off = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > INT_MAX || off > INT_MAX) {
      return Status::InvalidArgument(std::string(what) + ": more than 2 GiB per call is not supported");
    }
    (*counts)[i] = static_cast<int>(bytes[i]);
    (*displs)[i] = static_cast<int>(off);
    off += bytes[i];
  }
  return Status::OK();
}

}  // namespace

MPIBackend::MPIBackend(MPI_Comm comm, int64_t slice_bytes)
    : comm_(comm), slice_bytes_(slice_bytes > 0 ? slice_bytes : (int64_t)1 << 24) {
  MPI_Type_contiguous(2, MPI_BYTE, &float16_);
  MPI_Type_commit(&float16_);
  MPI_Op_create(&Float16Op<ReduceOp::kSum>, 1, &f16_sum_);
  MPI_Op_create(&Float16Op<ReduceOp::kMin>, 1, &f16_min_);
  MPI_Op_create(&Float16Op<ReduceOp::kMax>, 1, &f16_max_);
  MPI_Op_create(&Float16Op<ReduceOp::kProduct>, 1, &f16_prod_);
}

MPIBackend::~MPIBackend() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  MPI_Type_free(&float16_);
  for (MPI_Op* op : {&f16_sum_, &f16_min_, &f16_max_, &f16_prod_}) MPI_Op_free(op);
}

MPI_Datatype MPIBackend::Type(DataType t) const {
  switch (t) {
    case DataType::kFloat32: return MPI_FLOAT;
    case DataType::kFloat64: return MPI_DOUBLE;
    case DataType::kFloat16: return float16_;
    case DataType::kUInt8: return MPI_UINT8_T;
    case DataType::kInt8: return MPI_INT8_T;
    case DataType::kInt32: return MPI_INT32_T;
    case DataType::kInt64: return MPI_INT64_T;
  }
  return MPI_BYTE;
}

MPI_Op MPIBackend::Op(DataType t, ReduceOp op) const {
  if (t == DataType::kFloat16) {
    switch (op) {
      case ReduceOp::kMin: return f16_min_;
      case ReduceOp::kMax: return f16_max_;
      case ReduceOp::kProduct: return f16_prod_;
      default: return f16_sum_;
    }
  }
  switch (op) {
    case ReduceOp::kMin: return MPI_MIN;
    case ReduceOp::kMax: return MPI_MAX;
    case ReduceOp::kProduct: return MPI_PROD;
    default: return MPI_SUM;  // Sum, and Average (the executor divides afterwards)
  }
}

Status MPIBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op) {
  const int esize = DTypeSize(dtype);
  const int64_t per_call = std::max<int64_t>(1, slice_bytes_ / esize);
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < count; done += per_call) {
    int n = static_cast<int>(std::min(per_call, count - done));
    Status s;
    if (GetWaitPolicy().blocking_data) {
      s = Check(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, Type(dtype), Op(dtype, op), comm_),
                "MPI_Allreduce");
    } else {
      MPI_Request req;
      s = Check(MPI_Iallreduce(MPI_IN_PLACE, p + done * esize, n, Type(dtype), Op(dtype, op), comm_,
                               &req), "MPI_Iallreduce");
      if (s.ok()) s = WaitRequest(&req, "MPI_Iallreduce");
    }
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status MPIBackend::Broadcast(void* buf, int64_t bytes, int root) {
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes; done += slice_bytes_) {
    int n = static_cast<int>(std::min(slice_bytes_, bytes - done));
    Status s;
    if (GetWaitPolicy().blocking_data) {
      s = Check(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    } else {
      MPI_Request req;
      s = Check(MPI_Ibcast(p + done, n, MPI_BYTE, root, comm_, &req), "MPI_Ibcast");
      if (s.ok()) s = WaitRequest(&req, "MPI_Ibcast");
    }
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status MPIBackend::Allgatherv(const void* send, int64_t send_bytes, void* recv,
                              const std::vector<int64_t>& recv_bytes) {
  std::vector<int> counts, displs;
  auto s = ToIntCounts(recv_bytes, &counts, &displs, "allgather");
  if (!s.ok()) return s;
  MPI_Request req;
  s = Check(MPI_Iallgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(),
                            displs.data(), MPI_BYTE, comm_, &req), "MPI_Iallgatherv");
  if (!s.ok()) return s;
  return WaitRequest(&req, "MPI_Iallgatherv");
}

Status MPIBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                             void* recv, const std::vector<int64_t>& recv_bytes) {
  std::vector<int> scounts, sdispls, rcounts, rdispls;
  auto s = ToIntCounts(send_bytes, &scounts, &sdispls, "alltoall");
  if (!s.ok()) return s;
  s = ToIntCounts(recv_bytes, &rcounts, &rdispls, "alltoall");
  if (!s.ok()) return s;
  MPI_Request req;
  s = Check(MPI_Ialltoallv(send, scounts.data(), sdispls.data(), MPI_BYTE, recv, rcounts.data(),
                           rdispls.data(), MPI_BYTE, comm_, &req), "MPI_Ialltoallv");
  if (!s.ok()) return s;
  return WaitRequest(&req, "MPI_Ialltoallv");
}

Status MPIBackend::Reducescatter(const void* send, void* recv,
                                 const std::vector<int64_t>& recv_counts, DataType dtype,
                                 ReduceOp op) {
  std::vector<int> counts, displs;
  auto s = ToIntCounts(recv_counts, &counts, &displs, "reducescatter");
  if (!s.ok()) return s;
  if (GetWaitPolicy().blocking_data) {
    return Check(MPI_Reduce_scatter(send, recv, counts.data(), Type(dtype), Op(dtype, op), comm_),
                 "MPI_Reduce_scatter");
  }
  MPI_Request req;
  s = Check(MPI_Ireduce_scatter(send, recv, counts.data(), Type(dtype), Op(dtype, op), comm_, &req),
            "MPI_Ireduce_scatter");
  if (!s.ok()) return s;
  return WaitRequest(&req, "MPI_Ireduce_scatter");
}

}  // namespace mxhorovod
