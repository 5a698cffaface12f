#include "response_cache.h"

namespace mxhorovod {

bool ResponseCache::SameRequest(const Request& a, const Request& b) {
  return a.op_type == b.op_type && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.root_rank == b.root_rank && a.prescale == b.prescale && a.postscale == b.postscale &&
         a.shape == b.shape && a.splits == b.splits && a.group_size == b.group_size &&
         a.grouped == b.grouped;
}

ResponseCache::Lookup ResponseCache::Find(const Request& req, int* bit, int* also) const {
  *also = -1;
  auto it = by_name_.find(req.name);
  if (it == by_name_.end()) return kMiss;
  const int mine = it->second[req.size_exchange], other = it->second[!req.size_exchange];
  if (mine >= 0 && SameRequest(slots_[mine].request, req)) {
    *bit = mine;
    return kHit;
  }
  // The other phase's entry stays when it is of this kind (a changed allgather keeps its
  // exchange cached); another kind of collective under the name evicts it too.
  const int stale = other >= 0 && slots_[other].request.op_type != req.op_type ? other : -1;
  if (mine < 0 && stale < 0) return kMiss;
  *bit = mine >= 0 ? mine : stale;
  if (mine >= 0) *also = stale;
  return kInvalid;
}

ResponseCache::Bits ResponseCache::Entries(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? Bits{-1, -1} : it->second;
}

int ResponseCache::Put(const Request& req, const Response& resp) {
  int evicted = -1;
  if (capacity_ == 0) return evicted;
  auto it = by_name_.find(req.name);
  if (it != by_name_.end()) {  // the entry of this phase; the other's if of another kind
    const Bits old = it->second;  // Erase may drop the map node
    if (old[req.size_exchange] >= 0) Erase(old[req.size_exchange]);
    const int other = old[!req.size_exchange];
    if (other >= 0 && slots_[other].request.op_type != req.op_type) Erase(other);
  }
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
  by_name_.try_emplace(req.name, Bits{-1, -1}).first->second[req.size_exchange] = bit;
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
  auto it = by_name_.find(s.request.name);
  it->second[s.request.size_exchange] = -1;
  if (it->second[0] < 0 && it->second[1] < 0) by_name_.erase(it);
  s.used = false;
  free_.push_back(bit);
}

}  // namespace mxhorovod
