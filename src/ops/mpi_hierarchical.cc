#include "ops/mpi_hierarchical.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "ops/concatenation.h"
#include "ops/link_pace.h"
#include "ops/mpi_wait.h"
#include "ops/scale.h"

namespace mxhorovod {
namespace {

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
                                               int64_t slice_bytes, int64_t link_slice_bytes)
    : MPIAllreduceOverlay(flat), local_(local), cross_(cross),
      slice_bytes_(slice_bytes > 0 ? slice_bytes : (int64_t)1 << 22),
      link_slice_bytes_(link_slice_bytes > 0 ? link_slice_bytes : (int64_t)1 << 20) {
  MPI_Comm_rank(local_, &local_rank_);
  MPI_Comm_size(local_, &local_size_);
  MPI_Comm_size(cross_, &cross_size_);
  MPI_Comm_rank(cross_, &cross_rank_);
  MPI_Allreduce(&cross_size_, &hosts_, 1, MPI_INT, MPI_MAX, local_);
  constexpr int kHostChars = 256;
  char host[kHostChars] = {0};
  gethostname(host, sizeof(host) - 1);
  std::vector<char> all((size_t)kHostChars * cross_size_);
  MPI_Allgather(host, kHostChars, MPI_CHAR, all.data(), kHostChars, MPI_CHAR, cross_);
  for (int r = 0; r < cross_size_; ++r) {
    const char* h = &all[(size_t)kHostChars * r];
    cross_hosts_.emplace_back(h, strnlen(h, kHostChars));
  }
}

namespace {
constexpr int kRingTag = 0x4d58;
constexpr int kPokeTag = 0x4d59;  // never sent: MPI_Iprobe for it only drives progress
}  // namespace

Status MPIHierarchicalBackend::RingAcross(char* p, int n, int esize, MPI_Datatype type, MPI_Op op,
                                          const std::function<void()>& during) {
  const int h = cross_size_, r = cross_rank_;
  const int right = (r + 1) % h, left = (r + h - 1) % h;
  auto off = [&](int b) { return (int64_t)n * b / h; };  // block b: [off(b), off(b + 1))
  if ((int64_t)ring_tmp_.size() < ((int64_t)n / h + 1) * esize) ring_tmp_.resize(((int64_t)n / h + 1) * esize);
  LinkWait to_right, from_left;
  to_right.peers = cross_hosts_[right];
  from_left.peers = cross_hosts_[left];
  for (int phase = 0; phase < 2; ++phase) {
    for (int s = 0; s < h - 1; ++s) {
      // Reduce-scatter: send block r-s, receive block r-s-1 and reduce it in. Allgather:
      // send block r+1-s (reduced in full here), receive block r-s as it is.
      const int sb = ((phase == 0 ? r - s : r + 1 - s) % h + h) % h;
      const int rb = ((phase == 0 ? r - s - 1 : r - s) % h + h) % h;
      const int sn = (int)(off(sb + 1) - off(sb)), rn = (int)(off(rb + 1) - off(rb));
      char* into = phase == 0 ? ring_tmp_.data() : p + off(rb) * esize;
      MPI_Request reqs[2];
      auto s1 = CheckMPI(MPI_Irecv(into, rn, type, left, kRingTag, cross_, &reqs[0]),
                         "MPI_Irecv (hierarchical allreduce, ring across hosts)");
      if (!s1.ok()) return s1;
      auto s2 = CheckMPI(
          MPI_Isend(p + off(sb) * esize, sn, type, right, kRingTag, cross_, &reqs[1]),
          "MPI_Isend (hierarchical allreduce, ring across hosts)");
      from_left.bytes = (int64_t)rn * esize;
      to_right.bytes = (int64_t)sn * esize;
      // `during` drives MPI between its chunks of work (AllreduceBuffers' poke); the first
      // step's wait then drives what is left.
      if (phase == 0 && s == 0 && s2.ok() && during) during();
      auto w1 = WaitRequest(&reqs[0], "MPI_Irecv (hierarchical allreduce, ring across hosts)",
                            WaitFor::kData, &from_left);
      if (s2.ok()) {
        s2 = WaitRequest(&reqs[1], "MPI_Isend (hierarchical allreduce, ring across hosts)",
                         WaitFor::kData, &to_right);
      }
      if (!w1.ok()) return w1;
      if (!s2.ok()) return s2;
      if (phase == 0 && rn > 0) {
        auto s3 = CheckMPI(MPI_Reduce_local(ring_tmp_.data(), p + off(rb) * esize, rn, type, op),
                           "MPI_Reduce_local (hierarchical allreduce, ring across hosts)");
        if (!s3.ok()) return s3;
      }
    }
  }
  return Status::OK();
}

Status MPIHierarchicalBackend::Allreduce(void* buf, int64_t count, DataType dtype, ReduceOp op,
                                         double scale, bool* scaled) {
  return AllreduceBuffers({buf}, {count}, dtype, op, scale, scaled, {});
}

namespace {

// A group's concatenation (Concatenation), cut into slices of per_call elements. Open(k)
// gives slice k's memory: the buffer itself when the slice lies within one buffer, else a
// staging slot (k % kSlots) filled from the buffers; Close(k) copies a staged slice back.
class Pieces {
 public:
  static constexpr int64_t kPokeBytes = 256 << 10;  // 2 ms at 1 Gbit/s
  static constexpr int kSlots = 4;  // slices in the pipeline at once: t, t-1, t-2, t-3
  // `poke` is called between chunks of kPokeBytes of every copy: inside a ring step, it
  // drives MPI so the transfers on the wire go on while a slice is copied.
  Pieces(const std::vector<void*>& bufs, const std::vector<int64_t>& counts, int esize,
         int64_t per_call, std::vector<char>* staging, const std::function<void()>& poke)
      : bufs_(bufs), concat_(counts), esize_(esize), per_call_(per_call), staging_(staging),
        poke_(poke) {}
  int64_t count() const { return concat_.total(); }
  int64_t slices() const { return (count() + per_call_ - 1) / per_call_; }
  int n(int64_t k) const { return (int)std::min(per_call_, count() - k * per_call_); }
  char* Open(int64_t k) {
    const int64_t begin = k * per_call_;
    Slot& slot = slots_[k % kSlots];
    int parts = 0;
    concat_.Walk(begin, begin + n(k), [&](size_t i, int64_t off, int64_t) {
      if (parts++ == 0) slot = {(char*)bufs_[i] + off * esize_, false};
    });
    if (parts == 1) return slot.at;
    const size_t need = (size_t)kSlots * per_call_ * esize_;
    if (staging_->size() < need) staging_->resize(need);
    slot = {staging_->data() + (size_t)(k % kSlots) * per_call_ * esize_, true};
    Copy(k, true);
    return slot.at;
  }
  char* at(int64_t k) const { return slots_[k % kSlots].at; }
  // Slice k leaves the pipeline (slices leave in order); done(i) for each buffer whose
  // last element it holds (empty buffers with the first slice at or after them).
  void Close(int64_t k, const BufferDone& done) {
    if (slots_[k % kSlots].staged) Copy(k, false);
    const int64_t end = k * per_call_ + n(k);
    for (; next_done_ < bufs_.size() && concat_.start(next_done_ + 1) <= end; ++next_done_) {
      if (done) done(next_done_);
    }
  }

 private:
  struct Slot {
    char* at = nullptr;
    bool staged = false;
  };
  // Slice k's elements into (pack) or out of its staging slot.
  void Copy(int64_t k, bool pack) {
    const int64_t begin = k * per_call_;
    char* slice = slots_[k % kSlots].at;
    concat_.Walk(begin, begin + n(k), [&](size_t i, int64_t off, int64_t count) {
      char* in_buf = (char*)bufs_[i] + off * esize_;
      char* in_slice = slice + (concat_.start(i) + off - begin) * esize_;
      const int64_t bytes = count * esize_;
      for (int64_t at = 0; at < bytes; at += kPokeBytes) {
        const size_t n = (size_t)std::min<int64_t>(kPokeBytes, bytes - at);
        if (pack) {
          std::memcpy(in_slice + at, in_buf + at, n);
        } else {
          std::memcpy(in_buf + at, in_slice + at, n);
        }
        poke_();
      }
    });
  }
  const std::vector<void*>& bufs_;
  const Concatenation concat_;
  int esize_;
  int64_t per_call_;
  std::vector<char>* staging_;
  Slot slots_[kSlots];
  size_t next_done_ = 0;  // buffers [0, next_done_) reported done
  const std::function<void()>& poke_;
};

}  // namespace

Status MPIHierarchicalBackend::AllreduceBuffers(const std::vector<void*>& bufs,
                                                const std::vector<int64_t>& counts, DataType dtype,
                                                ReduceOp op, double scale, bool* scaled,
                                                const BufferDone& done) {
  // A floating-point result's scale (Average's 1/size, a postscale) is applied by each
  // host's local rank 0 to every slice once it is final, before its broadcast within the
  // host: one pass per host, each slice's pipelined with the transfer of the next, where
  // every rank made a pass over everything after the last slice. The same bits (the same
  // ScaleBuffer on the same values). Integers keep the caller's exact division.
  const auto started = std::chrono::steady_clock::now();
  const bool fold = scale != 1.0 && IsFloat(dtype);
  *scaled = fold;
  const int esize = DTypeSize(dtype);
  // Between more than 2 hosts a slice is cut into one block per host for the ring: 2 x
  // hosts link slices per slice keep each ring step at 2 link slices (64 MiB, 3 x 1 rank at
  // 1 Gbit/s: 1.67x the TCP floor in 1 MiB slices, 1.23 in 4, 1.15 in 3, 1.11 in 8).
  const int64_t slice = !flat_->spans_hosts() ? slice_bytes_
                        : hosts_ > 2         ? link_slice_bytes_ * 2 * hosts_
                                             : link_slice_bytes_;
  const int64_t per_call = std::max<int64_t>(1, std::min<int64_t>(slice, 1ll << 30) / esize);
  const MPI_Datatype type = flat_->Type(dtype);
  const MPI_Op mpi_op = flat_->Op(dtype, op);  // Average sums; the executor divides by size
  // Inside a ring step, drives MPI's progress (a probe for a message never sent), so that
  // the step's transfers go on while the work between its start and its wait copies or
  // scales; elsewhere nothing.
  bool in_ring = false;
  const std::function<void()> poke = [&]() {
    if (!in_ring) return;
    int flag = 0;
    MPI_Iprobe(MPI_ANY_SOURCE, kPokeTag, cross_, &flag, MPI_STATUS_IGNORE);
  };
  Pieces pieces(bufs, counts, esize, per_call, &staging_, poke);
  const int64_t count = pieces.count();
  const int64_t slices = pieces.slices();
  const bool root = local_rank_ == 0;
  const bool local = local_size_ > 1, cross = root && cross_size_ > 1;
  auto n_of = [&](int64_t k) { return pieces.n(k); };
  auto at = [&](int64_t k) { return pieces.at(k); };
  // On a local root between hosts every wait is a link wait (never asleep: asleep in a wait
  // within the host it would leave the transfer between hosts without progress), bounded
  // by the bytes of the slices in flight. The other ranks wait as on one host (asleep on
  // the doorbell, which the root rings): spinning, they took the cores the roots need.
  LinkWait link;
  link.peers = flat_->other_hosts();
  link.bytes = 4 * std::min<int64_t>(count, per_call) * esize;  // 2 slices, each both ways
  const LinkWait* lw = cross ? &link : nullptr;
  std::vector<MPI_Request> reduce(slices, MPI_REQUEST_NULL), across(slices, MPI_REQUEST_NULL),
      bcast(slices, MPI_REQUEST_NULL);
  Status result;
  auto start = [&](int rc, const char* what) {
    if (result.ok()) result = CheckMPI(rc, what);
  };
  auto wait = [&](MPI_Request* req, const char* what) {
    if (*req == MPI_REQUEST_NULL) return;
    auto s = WaitRequest(req, what, WaitFor::kData, lw);
    if (result.ok()) result = s;
  };
  const char* kReduce = "MPI_Ireduce (hierarchical allreduce, within the host)";
  const char* kAcross = "MPI_Iallreduce (hierarchical allreduce, across hosts)";
  const char* kBcast = "MPI_Ibcast (hierarchical allreduce, within the host)";
  // A pipeline of slices: at step t, slice t is reduced onto local rank 0 while slice t-1
  // crosses between the hosts and slice t-2 is broadcast within the host; slice t-3, whose
  // broadcast is done, leaves (Pieces::Close). Every rank of a host starts its calls on
  // `local_` in the same order (reduce t, then broadcast t-2) whatever completes when, as
  // MPI requires of nonblocking collectives. After an error nothing new starts; what
  // started is waited for, and nothing is copied back.
  int64_t closed = 0;  // slices [0, closed) have left the pipeline
  for (int64_t t = 0; t < slices + 2 && result.ok(); ++t) {
    const int64_t k1 = t - 1, k2 = t - 2;
    // Step t's work on other slices than k1: it runs inside k1's ring, while the ring's
    // first transfers are on the wire, else before and after k1's start across.
    auto open_next = [&]() {
      if (t >= slices || !result.ok()) return;
      char* p = pieces.Open(t);
      if (local) {
        // Local rank 0 reduces in place; the others only send (no receive buffer).
        start(MPI_Ireduce(root ? MPI_IN_PLACE : p, root ? p : nullptr, n_of(t), type, mpi_op, 0,
                          local_, &reduce[t]),
              kReduce);
      }
    };
    auto finish_earlier = [&]() {
      if (k2 < 0 || !result.ok()) return;
      wait(&across[k2], kAcross);
      if (fold && root && result.ok()) {
        const int64_t chunk = std::max<int64_t>(1, Pieces::kPokeBytes / esize);
        for (int64_t i = 0; i < n_of(k2); i += chunk) {
          ScaleBuffer(at(k2) + i * esize, std::min<int64_t>(chunk, n_of(k2) - i), dtype, scale);
          poke();
        }
      }
      if (local && result.ok()) {
        start(MPI_Ibcast(at(k2), n_of(k2), type, 0, local_, &bcast[k2]), kBcast);
      }
      if (k2 >= 1) {
        wait(&bcast[k2 - 1], kBcast);
        if (result.ok()) pieces.Close(closed++, done);
      }
    };
    const bool ring = cross && cross_size_ > 2 && k1 >= 0 && k1 < slices;
    if (!ring) open_next();
    if (k1 >= 0 && k1 < slices && result.ok()) {
      wait(&reduce[k1], kReduce);
      if (ring && result.ok()) {
        // The ring runs here; its waits drive the calls within the host meanwhile. Every
        // rank of the host still starts its calls on local_ in the same order: reduce t,
        // then broadcast t-2.
        // (A ring that returns OK has run it: it fails only where a transfer failed.)
        auto s = RingAcross(at(k1), n_of(k1), esize, type, mpi_op, [&]() {
          in_ring = true;
          open_next();
          finish_earlier();
          in_ring = false;
        });
        if (result.ok()) result = s;
        continue;
      } else if (cross && result.ok()) {
        start(MPI_Iallreduce(MPI_IN_PLACE, at(k1), n_of(k1), type, mpi_op, cross_, &across[k1]),
              kAcross);
      }
    }
    finish_earlier();
  }
  for (int64_t k = 0; k < slices; ++k) {
    wait(&reduce[k], kReduce);
    wait(&across[k], kAcross);
    wait(&bcast[k], kBcast);
  }
  for (; result.ok() && closed < slices; ++closed) pieces.Close(closed, done);
  if (result.ok() && hosts_ > 1) {
    // The call's time measures the link's rate (link_pace.h), on every rank of the host: the
    // others end with the local root's broadcast, and wait between hosts in broadcast and
    // allgather.
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - started;
    NoteLinkAllreduce(count * esize, hosts_, took.count());
  }
  return result;
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
