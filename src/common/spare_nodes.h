// Erased nodes of a std::unordered_map kept for the next insertion: for a map whose
// entries are inserted by one thread and erased by another on every collective (a node
// allocated by the calling thread and freed by the background thread left glibc's
// per-thread cache of the calling thread empty and contended for the arena lock;
// docs/benchmarks.md, thirteenth and fourteenth runs). Not thread-safe: used under the
// map's lock.
#ifndef MXHOROVOD_COMMON_SPARE_NODES_H_
#define MXHOROVOD_COMMON_SPARE_NODES_H_

#include <cstddef>
#include <utility>
#include <vector>

namespace mxhorovod {

template <class Map>
class SpareNodes {
 public:
  // At most `max` nodes are kept; beyond that, erased nodes are freed.
  explicit SpareNodes(size_t max) : max_(max) {}

  // map.emplace(key, value), in a kept node if there is one: when `key` is present the map
  // is unchanged and `value` dropped (as emplace).
  std::pair<typename Map::iterator, bool> Emplace(Map& map, const typename Map::key_type& key,
                                                  typename Map::mapped_type&& value) {
    if (spare_.empty()) return map.emplace(key, std::move(value));
    typename Map::node_type node = std::move(spare_.back());
    spare_.pop_back();
    node.key() = key;
    node.mapped() = std::move(value);
    auto r = map.insert(std::move(node));
    if (!r.inserted) {
      r.node.mapped() = typename Map::mapped_type();  // the dropped value goes now
      spare_.push_back(std::move(r.node));
    }
    return {r.position, r.inserted};
  }

  // map.erase(it), keeping the node.
  void Erase(Map& map, typename Map::iterator it) {
    if (spare_.size() >= max_) {
      map.erase(it);
    } else {
      spare_.push_back(map.extract(it));
    }
  }

 private:
  size_t max_;
  std::vector<typename Map::node_type> spare_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_SPARE_NODES_H_
