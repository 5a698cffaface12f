// Response cache: names negotiated before, each at a bit position that is the same on every
// rank, so a set of ready names is agreed by one bitwise AND instead of a round-trip to the
// coordinator (Horovod's response cache). Every rank applies the same Put/Touch/Erase
// sequence (the executed response list), so positions and LRU order stay identical.
#ifndef MXHOROVOD_COMMON_RESPONSE_CACHE_H_
#define MXHOROVOD_COMMON_RESPONSE_CACHE_H_

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
  // kHit: this rank's request equals the one cached under its name (bit set in *bit).
  // kInvalid: the name is cached with other parameters; the entry must be evicted everywhere.
  Lookup Find(const Request& req, int* bit) const;
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
  std::unordered_map<std::string, int> by_name_;
  std::list<int> lru_;  // front: most recently used
  std::vector<int> free_;  // freed positions, reused smallest last-in first
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_RESPONSE_CACHE_H_
