// A group of buffers seen as one concatenation of elements. Every rank has the same counts
// (negotiated), so an element range cuts the same buffers on every rank. Used by the
// backends that reduce a group where its buffers lie (cross-memory attach on one host,
// the hierarchical pipeline between hosts).
#ifndef MXHOROVOD_OPS_CONCATENATION_H_
#define MXHOROVOD_OPS_CONCATENATION_H_

#include <algorithm>
#include <cstdint>
#include <vector>

namespace mxhorovod {

class Concatenation {
 public:
  explicit Concatenation(const std::vector<int64_t>& counts) : starts_(counts.size() + 1, 0) {
    for (size_t i = 0; i < counts.size(); ++i) starts_[i + 1] = starts_[i] + counts[i];
  }
  int64_t total() const { return starts_.back(); }
  // First element of buffer i in the concatenation.
  int64_t start(size_t i) const { return starts_[i]; }
  // Calls f(buffer, its first element in the range, elements) for each non-empty part of
  // elements [lo, hi), in order.
  template <class F>
  void Walk(int64_t lo, int64_t hi, F&& f) const {
    size_t i = std::upper_bound(starts_.begin(), starts_.end(), lo) - starts_.begin() - 1;
    for (int64_t at = lo; at < hi; ++i) {
      if (starts_[i + 1] == starts_[i]) continue;
      const int64_t off = at - starts_[i], n = std::min(hi, starts_[i + 1]) - at;
      f(i, off, n);
      at += n;
    }
  }

 private:
  std::vector<int64_t> starts_;  // first element of each buffer, then the total
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_CONCATENATION_H_
