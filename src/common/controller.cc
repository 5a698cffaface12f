#include "controller.h"

#include <set>

#include "ops/mpi_wait.h"
#include "timeline.h"
#include "wire.h"

namespace mxhorovod {
namespace {

constexpr uint64_t kFlagUncached = 1;
constexpr uint64_t kFlagShutdown = 2;
constexpr uint64_t kFlagStallShutdown = 4;  // set by rank 0 only, with the other two
constexpr uint64_t kFlagJoined = 8;         // this rank has joined (hvd.join()) and waits

Status Check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return Status::OK();
  return Status::UnknownError(std::string("MPI error in ") + what + ": " + MPIErrorString(rc));
}

}  // namespace

Controller::Controller(MPI_Comm comm, int rank, int size, size_t cache_capacity, TensorQueue* queue,
                       const StallSettings& stall)
    : comm_(comm), rank_(rank), size_(size), queue_(queue), cache_(cache_capacity), table_(size),
      pending_hits_(cache_capacity), stall_(stall, rank, size) {}

Status Controller::ComputeResponses(bool shutdown_requested, CycleResult* out) {
  out->responses.clear();
  out->shutdown = false;
  out->stall_shutdown = false;
  out->shutdown_ranks.clear();
  stall_.BeginCycle();  // [stall]
  std::vector<Request> to_send;
  to_send.swap(resend_);
  std::vector<Request*> fresh;  // the queued entries' requests
  queue_->PopRequests(&fresh);
  const size_t words = (cache_.capacity() + 63) / 64;
  std::vector<uint64_t> invalid(words, 0);
  auto evict = [&](int bit) {
    if (bit >= 0) invalid[bit / 64] |= 1ull << (bit % 64);
  };
  for (Request* fresh_request : fresh) {
    Request& r = *fresh_request;
    r.rank = rank_;
    int bit = -1, also = -1;
    if (r.op_type == OpType::kJoin) joined_ = true;
    // While a rank is joined, names go to the coordinator, which knows the joined ranks:
    // a joined rank has no hit bits, so no cached name could be ready.
    // Its cache entries are evicted everywhere: a peer that answered it from the cache
    // (the join ended in between) resends it to the coordinator too, instead of waiting.
    if (r.op_type == OpType::kJoin || join_active_ || joined_) {
      for (int entry : cache_.Entries(r.name)) evict(entry);
      to_send.push_back(r);
      continue;
    }
    if (!r.local_error.empty() || IsControl(r.op_type)) {  // never answered from the cache
      // A failure (a refusal at the call) of a cached name evicts it everywhere, in both
      // phases: a peer's hit on it would otherwise wait for a request that never comes
      // (until the stall check resends it), while the coordinator waits for the peer's.
      for (int entry : cache_.Entries(r.name)) evict(entry);
      to_send.push_back(r);
      continue;
    }
    switch (cache_.capacity() ? cache_.Find(r, &bit, &also) : ResponseCache::kMiss) {
      case ResponseCache::kHit:
        pending_hits_.Set(bit, r.name);
        stall_.HitPending(bit);                                              // [stall]
        if (rank_ == 0) Timeline::Get().NegotiateCached(r.name, r.op_type);  // [timeline]
        break;
      case ResponseCache::kInvalid:
        evict(bit);
        evict(also);
        to_send.push_back(r);
        break;
      case ResponseCache::kMiss: to_send.push_back(r); break;
    }
  }
  // [stall] A hit waiting too long goes to the coordinator, which can name the missing
  // ranks: its entry is evicted everywhere, so the peers' pending hits on it follow.
  for (int bit : stall_.StalledHits(pending_hits_)) {
    invalid[bit / 64] |= 1ull << (bit % 64);
    TensorTableEntry* e = queue_->Find(pending_hits_.Name(bit));
    if (e) to_send.push_back(e->request);
    pending_hits_.Erase(bit);
  }
  // [stall] Rank 0 warns about stalled names; past the shutdown time it forces a coordinator
  // round (to send every rank the errors naming them) and asks every rank to stop.
  bool stall_stop = false;
  if (rank_ == 0 && stall_.CoordinatorCheckDue()) {
    stall_errors_.clear();
    stall_stop = stall_.CheckCoordinator(table_.Pending(), &stall_errors_);
  }

  // One AND-allreduce carries OR information as complements: ~(a|b) == ~a & ~b.
  std::vector<uint64_t> vec(1 + 2 * words);
  uint64_t flags = (to_send.empty() ? 0 : kFlagUncached) | (shutdown_requested ? kFlagShutdown : 0) |
                   (stall_stop ? kFlagUncached : 0) |
                   (stall_stop && stall_.stops_job() ? kFlagShutdown | kFlagStallShutdown : 0) |
                   (joined_ ? kFlagJoined : 0);
  vec[0] = ~flags;
  const std::vector<uint64_t>& hits = pending_hits_.bits();
  for (size_t w = 0; w < words; ++w) {
    vec[1 + w] = ~invalid[w];
    vec[1 + words + w] = hits[w];
  }
  MPI_Request req;
  auto s = Check(MPI_Iallreduce(MPI_IN_PLACE, vec.data(), (int)vec.size(), MPI_UINT64_T, MPI_BAND,
                                comm_, &req), "MPI_Iallreduce (negotiation)");
  if (s.ok()) s = WaitRequest(&req, "MPI_Iallreduce (negotiation)", WaitFor::kSmall, Link());
  if (!s.ok()) return s;
  flags = ~vec[0];
  join_active_ = flags & kFlagJoined;  // the same on every rank: decides caching below
  out->shutdown = flags & kFlagShutdown;
  out->stall_shutdown = flags & kFlagStallShutdown;
  if (out->shutdown) {
    // Once, at the end: who asked, so the others' errors can name the rank that shut down.
    int mine = shutdown_requested ? 1 : 0;
    std::vector<int> asked(size_);
    s = Check(MPI_Iallgather(&mine, 1, MPI_INT, asked.data(), 1, MPI_INT, comm_, &req),
              "MPI_Iallgather (shutdown)");
    if (s.ok()) s = WaitRequest(&req, "MPI_Iallgather (shutdown)", WaitFor::kSmall, Link());
    if (!s.ok()) return s;
    for (int r = 0; r < size_; ++r) if (asked[r]) out->shutdown_ranks.push_back(r);
  }

  // Evictions first, identically everywhere; a hit of ours on an evicted entry is resent.
  for (size_t w = 0; w < words; ++w) {
    uint64_t inv = ~vec[1 + w];
    for (int b = 0; b < 64 && inv; ++b) {
      if (!(inv & (1ull << b))) continue;
      inv &= ~(1ull << b);
      int bit = (int)(w * 64 + b);
      cache_.Erase(bit);
      if (pending_hits_.Has(bit)) {
        TensorTableEntry* e = queue_->Find(pending_hits_.Name(bit));
        if (e) to_send.push_back(e->request);
        pending_hits_.Erase(bit);
      }
    }
  }
  size_t ready_hits = 0;  // one response each: room for them at once (a copy per growth step)
  for (size_t w = 0; w < words; ++w) ready_hits += __builtin_popcountll(vec[1 + words + w] & vec[1 + w]);
  out->responses.reserve(out->responses.size() + ready_hits);
  for (size_t w = 0; w < words; ++w) {
    uint64_t ready = vec[1 + words + w] & vec[1 + w];
    for (int b = 0; b < 64 && ready; ++b) {
      if (!(ready & (1ull << b))) continue;
      ready &= ~(1ull << b);
      int bit = (int)(w * 64 + b);
      out->responses.push_back(cache_.Get(bit));
      cache_.Touch(bit);
      pending_hits_.Erase(bit);
    }
  }
  if (join_active_) {
    // Hits left waiting (a joined rank's bits are all zero) go to the coordinator.
    const std::vector<uint64_t>& left = pending_hits_.bits();
    for (size_t w = 0; w < words; ++w) {
      for (uint64_t m = left[w]; m;) {
        const int b = __builtin_ctzll(m);
        m &= m - 1;
        const int bit = (int)(w * 64 + b);
        TensorTableEntry* e = queue_->Find(pending_hits_.Name(bit));
        if (e) resend_.push_back(e->request);
        pending_hits_.Erase(bit);
      }
    }
  }
  if (!(flags & kFlagUncached)) return Status::OK();

  std::vector<Response> negotiated;
  s = Coordinate(to_send, &negotiated);
  if (!s.ok()) return s;
  for (auto& resp : negotiated) {
    if (resp.type == Response::kError && cache_.capacity()) {
      // A failed tensor waiting here as a cache hit (a group's tensor that the peers lack,
      // named in their group-size mismatch) is no longer this rank's hit.
      for (const auto& name : resp.names) {
        TensorTableEntry* e = queue_->Find(name);
        int bit = -1, also = -1;
        if (e && cache_.Find(e->request, &bit, &also) == ResponseCache::kHit && pending_hits_.Has(bit) &&
            pending_hits_.Name(bit) == name) {
          pending_hits_.Erase(bit);
        }
      }
    }
    if (resp.op_type == OpType::kJoin) joined_ = false;  // every rank has joined
    // Not while a rank is joined: a joined rank lacks the entries it would cache.
    if (resp.type == Response::kOk && cache_.capacity() && !IsControl(resp.op_type) && !join_active_ &&
        resp.op_type != OpType::kJoin) {
      TensorTableEntry* e = queue_->Find(resp.names[0]);
      if (e) {
        Request mine = e->request;
        mine.rank = rank_;
        int evicted = cache_.Put(mine, resp);
        // Every rank evicts the same entry here; whoever was waiting on it asks again.
        if (evicted >= 0 && pending_hits_.Has(evicted)) {
          TensorTableEntry* w = queue_->Find(pending_hits_.Name(evicted));
          if (w) resend_.push_back(w->request);
          pending_hits_.Erase(evicted);
        }
      }
    }
    out->responses.push_back(std::move(resp));
  }
  return Status::OK();
}

Status Controller::Coordinate(std::vector<Request> mine, std::vector<Response>* out) {
  // Requests taken back from the queue (evicted or invalidated hits) carry no rank yet.
  for (auto& r : mine) r.rank = rank_;
  std::string payload = EncodeRequests(mine);
  int64_t len = (int64_t)payload.size();
  std::vector<int64_t> lens(rank_ == 0 ? size_ : 0);
  MPI_Request req;
  auto s = Check(MPI_Igather(&len, 1, MPI_INT64_T, lens.data(), 1, MPI_INT64_T, 0, comm_, &req),
                 "MPI_Igather (negotiation)");
  if (s.ok()) s = WaitRequest(&req, "MPI_Igather (negotiation)", WaitFor::kSmall, Link());
  if (!s.ok()) return s;
  std::vector<int> counts, displs;
  std::string all;
  if (rank_ == 0) {
    int64_t total = 0;
    for (int r = 0; r < size_; ++r) {
      counts.push_back((int)lens[r]);
      displs.push_back((int)total);
      total += lens[r];
    }
    all.resize(total);
  }
  s = Check(MPI_Igatherv(payload.data(), (int)len, MPI_BYTE, &all[0], counts.data(), displs.data(),
                         MPI_BYTE, 0, comm_, &req), "MPI_Igatherv (negotiation)");
  if (s.ok()) s = WaitRequest(&req, "MPI_Igatherv (negotiation)", WaitFor::kData, Link());
  if (!s.ok()) return s;

  std::string answer;
  if (rank_ == 0) {
    std::vector<Response> ready;
    for (int r = 0; r < size_; ++r) {
      auto reqs = DecodeRequests(all.data() + displs[r], counts[r]);
      if (Timeline::Get().enabled()) {  // [timeline]
        for (const auto& q : reqs) Timeline::Get().NegotiateRankReady(q.name, q.op_type, r);
      }
      table_.Add(reqs, &ready);
    }
    table_.EndRound();
    // [stall] Stall shutdown: the names still waiting get their errors on every rank.
    for (auto& err : stall_errors_) {
      if (!table_.Contains(err.names[0])) continue;  // completed in this very round
      table_.Erase(err.names[0]);
      ready.push_back(std::move(err));
    }
    stall_errors_.clear();
    answer = EncodeResponses(ready);
  }
  int64_t alen = (int64_t)answer.size();
  s = Check(MPI_Ibcast(&alen, 1, MPI_INT64_T, 0, comm_, &req), "MPI_Ibcast (negotiation)");
  if (s.ok()) s = WaitRequest(&req, "MPI_Ibcast (negotiation)", WaitFor::kSmall, Link());
  if (!s.ok()) return s;
  answer.resize(alen);
  s = Check(MPI_Ibcast(&answer[0], (int)alen, MPI_BYTE, 0, comm_, &req), "MPI_Ibcast (negotiation)");
  if (s.ok()) s = WaitRequest(&req, "MPI_Ibcast (negotiation)", WaitFor::kData, Link());
  if (!s.ok()) return s;
  *out = DecodeResponses(answer.data(), answer.size());
  return Status::OK();
}

}  // namespace mxhorovod
