// Response cache: names negotiated before, each at a bit position that is the same on every
// rank, so a set of ready names is agreed by one bitwise AND instead of a round-trip to the
// coordinator (Horovod's response cache). Every rank applies the same Put/Touch/Erase
// sequence (the executed response list), so positions and LRU order stay identical.
//
// A name holds at most two entries, of one kind of collective: an allgather's or alltoall's
// size exchange (Request::size_exchange) and its data collective carry the call's name, and
// both are cached. Every rank's n-th call of a name is in the same phase (calls of a name
// run in call order, and the data waits for every rank's exchange), so a hit on one entry
// never waits for a peer's hit on the other. A request of another kind evicts both
// everywhere: a peer's hit on them is negotiated again and meets it (a mismatch error).
#ifndef MXHOROVOD_COMMON_RESPONSE_CACHE_H_
#define MXHOROVOD_COMMON_RESPONSE_CACHE_H_

#include <array>
#include <list>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace mxhorovod {

class ResponseCache {
 public:
  enum Lookup { kMiss, kHit, kInvalid };
  explicit ResponseCache(size_t capacity) : capacity_(capacity) {}
  size_t capacity() const { return capacity_; }
  // kHit: this rank's request equals the one cached under its name and phase (bit set in
  // *bit). kInvalid: the name is cached with other parameters: the entries in *bit and
  // *also (-1: none) must be evicted everywhere.
  Lookup Find(const Request& req, int* bit, int* also) const;
  // By name: [0] the collective's entry, [1] its size exchange's (-1: none).
  using Bits = std::array<int, 2>;
  // The entries cached under `name`, both phases ({-1, -1}: none).
  Bits Entries(const std::string& name) const;
  // Records a negotiated response with this rank's request; evicts the least recently used
  // entry when full and returns its bit (-1 if none), whose position is now reused: a
  // request waiting on that bit must be negotiated again. No-op when capacity is 0.
  int Put(const Request& req, const Response& resp);
  const Response& Get(int bit) const { return slots_[bit].response; }
  void Touch(int bit);
  void Erase(int bit);

 private:
  struct Slot {
    bool used = false;
    Request request;
    Response response;
    std::list<int>::iterator lru;
  };
  static bool SameRequest(const Request& a, const Request& b);
  size_t capacity_;
  std::vector<Slot> slots_;
  std::unordered_map<std::string, Bits> by_name_;
  std::list<int> lru_;  // front: most recently used
  std::vector<int> free_;  // freed positions, reused smallest last-in first
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_RESPONSE_CACHE_H_
