#include "ops/mpi_hierarchical.h"

#include <algorithm>
#include <string>
#include <vector>

#include "ops/mpi_wait.h"

namespace mxhorovod {
namespace {

// Starts a nonblocking call (its return code in rc) and waits for it.
Status RunAndWait(int rc, MPI_Request* req, const char* what) {
  auto s = CheckMPI(rc, what);
  if (!s.ok()) return s;
  return WaitRequest(req, what);
}

std::string RankList(const std::vector<int>& flags, int want) {
  std::string out;
  for (size_t r = 0; r < flags.size(); ++r) {
    if (flags[r] != want) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(r);
  }
  return out;
}

}  // namespace

MPIHierarchicalBackend::MPIHierarchicalBackend(MPIBackend* flat, MPI_Comm local, MPI_Comm cross,
                                               int64_t slice_bytes)
    : MPIAllreduceOverlay(flat), local_(local), cross_(cross),
      slice_bytes_(slice_bytes > 0 ? slice_bytes : (int64_t)1 << 22) {
  MPI_Comm_rank(local_, &local_rank_);
  MPI_Comm_size(local_, &local_size_);
  MPI_Comm_size(cross_, &cross_size_);
}

Status MPIHierarchicalBackend::AllreduceSlice(char* p, int n, MPI_Datatype type, MPI_Op op) {
  MPI_Request req;
  if (local_size_ > 1) {
    // Local rank 0 reduces in place; the others only send (no receive buffer).
    const bool root = local_rank_ == 0;
    auto s = RunAndWait(MPI_Ireduce(root ? MPI_IN_PLACE : p, root ? p : nullptr, n, type, op, 0,
                                    local_, &req), &req,
                        "MPI_Ireduce (hierarchical allreduce, within the host)");
    if (!s.ok()) return s;
  }
  if (local_rank_ == 0 && cross_size_ > 1) {
    auto s = RunAndWait(MPI_Iallreduce(MPI_IN_PLACE, p, n, type, op, cross_, &req), &req,
                        "MPI_Iallreduce (hierarchical allreduce, across hosts)");
    if (!s.ok()) return s;
  }
  if (local_size_ > 1) {
    return RunAndWait(MPI_Ibcast(p, n, type, 0, local_, &req), &req,
                      "MPI_Ibcast (hierarchical allreduce, within the host)");
  }
  return Status::OK();
}

Status MPIHierarchicalBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op,
                                         double /*scale*/, bool* scaled) {
  *scaled = false;
  const int esize = DTypeSize(dtype);
  const int64_t per_call = std::max<int64_t>(1, slice_bytes_ / esize);
  const MPI_Datatype type = flat_->Type(dtype);
  const MPI_Op mpi_op = flat_->Op(dtype, op);  // Average sums; the executor divides by size
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < count; done += per_call) {
    auto s = AllreduceSlice(p + done * esize, static_cast<int>(std::min(per_call, count - done)),
                            type, mpi_op);
    if (!s.ok()) return s;
  }
  return Status::OK();
}

Status AgreeOnHierarchical(MPI_Comm comm, bool mine) {
  int size = 0;
  MPI_Comm_size(comm, &size);
  std::vector<int> flags(size);
  int flag = mine ? 1 : 0;
  auto s = CheckMPI(MPI_Allgather(&flag, 1, MPI_INT, flags.data(), 1, MPI_INT, comm), "MPI_Allgather");
  if (!s.ok()) return s;
  if (std::all_of(flags.begin(), flags.end(), [&](int f) { return f == flags[0]; })) return s;
  return Status::InvalidArgument(
      "HOROVOD_HIERARCHICAL_ALLREDUCE differs between ranks: on for ranks " + RankList(flags, 1) +
      "; off for ranks " + RankList(flags, 0) + ". Set it the same way for every rank.");
}

}  // namespace mxhorovod
