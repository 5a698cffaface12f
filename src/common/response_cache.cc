#include "response_cache.h"

namespace mxhorovod {

bool ResponseCache::SameRequest(const Request& a, const Request& b) {
  return a.op_type == b.op_type && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.shape == b.shape && a.splits == b.splits && a.group_size == b.group_size;
}

ResponseCache::Lookup ResponseCache::Find(const Request& req, int* bit) const {
  auto it = by_name_.find(req.name);
  if (it == by_name_.end()) return kMiss;
  *bit = it->second;
  return SameRequest(slots_[it->second].request, req) ? kHit : kInvalid;
}

int ResponseCache::Put(const Request& req, const Response& resp) {
  int evicted = -1;
  if (capacity_ == 0) return evicted;
  auto it = by_name_.find(req.name);
  if (it != by_name_.end()) Erase(it->second);
  int bit;
  if (!free_.empty()) {
    bit = free_.back();
    free_.pop_back();
  } else if (slots_.size() < capacity_) {
    bit = static_cast<int>(slots_.size());
    slots_.emplace_back();
  } else {
    evicted = lru_.back();
    Erase(evicted);
    bit = free_.back();
    free_.pop_back();
  }
  Slot& s = slots_[bit];
  s.used = true;
  s.request = req;
  s.response = resp;
  lru_.push_front(bit);
  s.lru = lru_.begin();
  by_name_[req.name] = bit;
  return evicted;
}

void ResponseCache::Touch(int bit) {
  Slot& s = slots_[bit];
  if (!s.used) return;
  lru_.splice(lru_.begin(), lru_, s.lru);  // relinks the node: no free and malloc per hit
}

void ResponseCache::Erase(int bit) {
  Slot& s = slots_[bit];
  if (!s.used) return;
  lru_.erase(s.lru);
  by_name_.erase(s.request.name);
  s.used = false;
  free_.push_back(bit);
}

}  // namespace mxhorovod
