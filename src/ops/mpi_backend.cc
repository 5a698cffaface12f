#include "ops/mpi_backend.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "ops/link_pace.h"
#include "ops/mpi_wait.h"
#include "ops/scale.h"

namespace mxhorovod {
namespace {

constexpr int kHostChars = 256;

int64_t Sum(const std::vector<int64_t>& v) {
  int64_t n = 0;
  for (int64_t x : v) n += x;
  return n;
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

std::string OtherHosts(MPI_Comm comm, int* ranks_here, int* hosts) {
  int size = 1;
  MPI_Comm_size(comm, &size);
  char host[kHostChars] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> all((size_t)kHostChars * size);
  MPI_Allgather(host, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, comm);
  std::vector<std::string> others;
  *ranks_here = 0;
  for (int r = 0; r < size; ++r) {
    std::string h(&all[(size_t)kHostChars * r], strnlen(&all[(size_t)kHostChars * r], kHostChars));
    if (h == host) {
      ++*ranks_here;
    } else if (std::find(others.begin(), others.end(), h) == others.end()) {
      others.push_back(h);
    }
  }
  if (hosts) *hosts = 1 + (int)others.size();
  std::string out;
  for (const auto& h : others) out += (out.empty() ? "" : ", ") + h;
  return out;
}

MPIBackend::MPIBackend(MPI_Comm comm, int64_t slice_bytes, int64_t link_slice_bytes)
    : comm_(comm), slice_bytes_(slice_bytes > 0 ? slice_bytes : (int64_t)1 << 22),
      link_slice_bytes_(link_slice_bytes > 0 ? link_slice_bytes : (int64_t)1 << 20) {
  MPI_Comm_size(comm_, &size_);
  other_hosts_ = OtherHosts(comm_, &ranks_here_, &hosts_);
  link_.peers = other_hosts_;
}

const LinkWait* MPIBackend::Link(int64_t bytes, bool pause) {
  if (other_hosts_.empty()) return nullptr;
  link_.bytes = bytes * ranks_here_;
  link_.pause = pause;
  return &link_;
}

MPI_Op MPIBackend::ReductionOp(DataType dtype, ReduceOp op, double scale, bool* scaled) {
  *scaled = false;
  if (scale != 1.0 && size_ == 2 && (op == ReduceOp::kSum || op == ReduceOp::kAverage)) {
    MPI_Op folded = ops_.ScaledSum(dtype, scale);
    if (folded != MPI_OP_NULL) {
      *scaled = true;
      return folded;
    }
  }
  return Op(dtype, op);
}

Status MPIBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op,
                             double scale, bool* scaled) {
  const MPI_Op mpi_op = ReductionOp(dtype, op, scale, scaled);
  const int esize = DTypeSize(dtype);
  const int64_t per_call =
      std::max<int64_t>(1, (spans_hosts() ? link_slice_bytes_ : slice_bytes_) / esize);
  char* p = static_cast<char*>(buf);
  const auto started = std::chrono::steady_clock::now();
  // Between hosts, the call's time measures the link's rate (link_pace.h). MPICH's flat
  // allreduce sends about the floor's bytes per rank of a host, not per host (twice the
  // payload per host on 2 hosts x 2 ranks; running.md): counted so.
  auto note = [&]() {
    if (!spans_hosts()) return;
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    NoteLinkAllreduce(count * esize * ranks_here_, hosts_, took.count());
  };
  if (GetWaitPolicy().blocking_data) {
    for (int64_t done = 0; done < count; done += per_call) {
      int n = static_cast<int>(std::min(per_call, count - done));
      auto s = CheckMPI(MPI_Allreduce(MPI_IN_PLACE, p + done * esize, n, Type(dtype), mpi_op, comm_),
                        "MPI_Allreduce");
      if (!s.ok()) return s;
    }
    note();
    return Status::OK();
  }
  // Between hosts two slices are in flight (started in the same order on every rank, as
  // MPI requires of nonblocking collectives); on one host one.
  const int window = spans_hosts() ? kLinkWindow : 1;
  MPI_Request reqs[kLinkWindow];
  int64_t bytes[kLinkWindow] = {0};
  int head = 0, in_flight = 0;
  Status result;
  auto wait_oldest = [&]() {
    const int i = (head + kLinkWindow - in_flight) % kLinkWindow;
    // A reduction's bytes cross the link about twice (reduce-scatter, then allgather).
    auto s = WaitRequest(&reqs[i], "MPI_Iallreduce", WaitFor::kData, Link(2 * bytes[i]));
    --in_flight;
    if (result.ok()) result = s;
  };
  for (int64_t done = 0; done < count && result.ok(); done += per_call) {
    if (in_flight == window) wait_oldest();
    if (!result.ok()) break;
    int n = static_cast<int>(std::min(per_call, count - done));
    auto s = CheckMPI(MPI_Iallreduce(MPI_IN_PLACE, p + done * esize, n, Type(dtype), mpi_op, comm_,
                                     &reqs[head]), "MPI_Iallreduce");
    if (!s.ok()) {
      result = s;
      break;
    }
    bytes[head] = (int64_t)n * esize;
    head = (head + 1) % kLinkWindow;
    ++in_flight;
  }
  while (in_flight > 0) wait_oldest();  // every started call, also after an error
  if (result.ok()) note();
  return result;
}

Status MPIBackend::Broadcast(void* buf, int64_t bytes, int root) {
  char* p = static_cast<char*>(buf);
  for (int64_t done = 0; done < bytes; done += slice_bytes_) {
    int n = static_cast<int>(std::min(slice_bytes_, bytes - done));
    Status s;
    if (GetWaitPolicy().blocking_data) {
      s = CheckMPI(MPI_Bcast(p + done, n, MPI_BYTE, root, comm_), "MPI_Bcast");
    } else {
      MPI_Request req;
      s = CheckMPI(MPI_Ibcast(p + done, n, MPI_BYTE, root, comm_, &req), "MPI_Ibcast");
      if (s.ok()) s = WaitRequest(&req, "MPI_Ibcast", WaitFor::kData, Link(2 * (int64_t)n));
    }
    if (!s.ok()) return s;
  }
  return Status::OK();
}

// Adasum's tag: the library's other point-to-point traffic (the hierarchical ring) runs on
// other communicators, but a distinct tag keeps any future one apart.
constexpr int kSendrecvTag = 0x4d59;
// Bytes per message: MPI counts are ints.
constexpr int64_t kSendrecvChunk = (int64_t)1 << 30;

Status MPIBackend::Sendrecv(const void* send, int64_t send_bytes, int dest, void* recv,
                            int64_t recv_bytes, int source) {
  const char* ps = static_cast<const char*>(send);
  char* pr = static_cast<char*>(recv);
  if (dest < 0) send_bytes = 0;
  if (source < 0) recv_bytes = 0;
  for (int64_t done = 0; done < send_bytes || done < recv_bytes; done += kSendrecvChunk) {
    const int sn = (int)std::max<int64_t>(0, std::min(kSendrecvChunk, send_bytes - done));
    const int rn = (int)std::max<int64_t>(0, std::min(kSendrecvChunk, recv_bytes - done));
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    Status s;
    if (rn > 0) {
      s = CheckMPI(MPI_Irecv(pr + done, rn, MPI_BYTE, source, kSendrecvTag, comm_, &reqs[0]),
                   "MPI_Irecv");
    }
    Status s2;
    if (s.ok() && sn > 0) {
      s2 = CheckMPI(MPI_Isend(ps + done, sn, MPI_BYTE, dest, kSendrecvTag, comm_, &reqs[1]),
                    "MPI_Isend");
    }
    // Every started request is waited for, also after an error.
    Status w1, w2;
    if (reqs[0] != MPI_REQUEST_NULL) w1 = WaitRequest(&reqs[0], "MPI_Irecv", WaitFor::kData, Link(rn));
    if (reqs[1] != MPI_REQUEST_NULL) w2 = WaitRequest(&reqs[1], "MPI_Isend", WaitFor::kData, Link(sn));
    for (const Status* x : {&s, &s2, &w1, &w2}) {
      if (!x->ok()) return *x;
    }
  }
  return Status::OK();
}

Status MPIBackend::Allgatherv(const void* send, int64_t send_bytes, void* recv,
                              const std::vector<int64_t>& recv_bytes) {
  std::vector<int> counts, displs;
  auto s = ToIntCounts(recv_bytes, &counts, &displs, "allgather");
#if MPI_VERSION >= 4
  if (!s.ok()) {  // 2 GiB or more in the output (3 ranks of 1 GiB): MPI-4's large counts
    std::vector<MPI_Count> big_counts(recv_bytes.begin(), recv_bytes.end());
    std::vector<MPI_Aint> big_displs(recv_bytes.size());
    for (size_t i = 1; i < recv_bytes.size(); ++i) big_displs[i] = big_displs[i - 1] + recv_bytes[i - 1];
    MPI_Request req;
    s = CheckMPI(MPI_Iallgatherv_c(send, send_bytes, MPI_BYTE, recv, big_counts.data(),
                                   big_displs.data(), MPI_BYTE, comm_, &req), "MPI_Iallgatherv_c");
    return s.ok() ? WaitRequest(&req, "MPI_Iallgatherv_c", WaitFor::kData, Link(Sum(recv_bytes))) : s;
  }
#endif
  if (!s.ok()) return s;
  MPI_Request req;
  s = CheckMPI(MPI_Iallgatherv(send, static_cast<int>(send_bytes), MPI_BYTE, recv, counts.data(),
                            displs.data(), MPI_BYTE, comm_, &req), "MPI_Iallgatherv");
  if (!s.ok()) return s;
  return WaitRequest(&req, "MPI_Iallgatherv", WaitFor::kData, Link(Sum(recv_bytes)));
}

Status MPIBackend::Alltoallv(const void* send, const std::vector<int64_t>& send_bytes,
                             void* recv, const std::vector<int64_t>& recv_bytes) {
  std::vector<int> scounts, sdispls, rcounts, rdispls;
  auto s = ToIntCounts(send_bytes, &scounts, &sdispls, "alltoall");
  if (s.ok()) s = ToIntCounts(recv_bytes, &rcounts, &rdispls, "alltoall");
#if MPI_VERSION >= 4
  if (!s.ok()) {  // 2 GiB or more sent or received: MPI-4's large counts
    auto big = [](const std::vector<int64_t>& bytes, std::vector<MPI_Count>* counts,
                  std::vector<MPI_Aint>* displs) {
      counts->assign(bytes.begin(), bytes.end());
      displs->assign(bytes.size(), 0);
      for (size_t i = 1; i < bytes.size(); ++i) (*displs)[i] = (*displs)[i - 1] + bytes[i - 1];
    };
    std::vector<MPI_Count> sc, rc;
    std::vector<MPI_Aint> sd, rd;
    big(send_bytes, &sc, &sd);
    big(recv_bytes, &rc, &rd);
    MPI_Request req;
    s = CheckMPI(MPI_Ialltoallv_c(send, sc.data(), sd.data(), MPI_BYTE, recv, rc.data(), rd.data(),
                                  MPI_BYTE, comm_, &req), "MPI_Ialltoallv_c");
    return s.ok() ? WaitRequest(&req, "MPI_Ialltoallv_c", WaitFor::kData,
                                Link(std::max(Sum(send_bytes), Sum(recv_bytes)), false)) : s;
  }
#endif
  if (!s.ok()) return s;
  MPI_Request req;
  s = CheckMPI(MPI_Ialltoallv(send, scounts.data(), sdispls.data(), MPI_BYTE, recv, rcounts.data(),
                           rdispls.data(), MPI_BYTE, comm_, &req), "MPI_Ialltoallv");
  if (!s.ok()) return s;
  // (No pause: MPICH's alltoall advances in small steps, one per test; see LinkWait.)
  return WaitRequest(&req, "MPI_Ialltoallv", WaitFor::kData,
                     Link(std::max(Sum(send_bytes), Sum(recv_bytes)), false));
}

Status MPIBackend::Reducescatter(const void* send, void* recv,
                                 const std::vector<int64_t>& recv_counts, DataType dtype,
                                 ReduceOp op) {
  std::vector<int> counts, displs;
  auto s = ToIntCounts(recv_counts, &counts, &displs, "reducescatter");
  if (!s.ok()) return s;
  if (GetWaitPolicy().blocking_data) {
    return CheckMPI(MPI_Reduce_scatter(send, recv, counts.data(), Type(dtype), Op(dtype, op), comm_),
                 "MPI_Reduce_scatter");
  }
  MPI_Request req;
  s = CheckMPI(MPI_Ireduce_scatter(send, recv, counts.data(), Type(dtype), Op(dtype, op), comm_, &req),
            "MPI_Ireduce_scatter");
  if (!s.ok()) return s;
  // (No pause: not measured with one; a schedule like alltoall's.)
  return WaitRequest(&req, "MPI_Ireduce_scatter", WaitFor::kData,
                     Link(2 * Sum(recv_counts) * DTypeSize(dtype), false));
}

}  // namespace mxhorovod
