#include "fusion.h"

#include <algorithm>

namespace mxhorovod {
namespace {

bool SameKey(const FusionItem& a, const FusionItem& b) {
  return a.op_type == b.op_type && a.dtype == b.dtype && a.reduce_op == b.reduce_op &&
         a.prescale == b.prescale && a.postscale == b.postscale;
}

}  // namespace

std::vector<std::vector<int>> PlanFusion(const std::vector<FusionItem>& items,
                                         int64_t threshold_bytes) {
  std::vector<std::vector<int>> groups;
  std::vector<int64_t> group_bytes;
  // Open group per distinct key; few keys per cycle, so a linear scan is cheapest.
  std::vector<int> open;
  for (int i = 0; i < (int)items.size(); ++i) {
    const FusionItem& it = items[i];
    int target = -1;
    if (it.fusable && it.bytes <= threshold_bytes) {
      for (size_t k = 0; k < open.size(); ++k) {
        int g = open[k];
        if (SameKey(items[groups[g][0]], it)) {
          if (group_bytes[g] + it.bytes <= threshold_bytes) {
            target = g;
          } else {
            open.erase(open.begin() + k);  // full: the next one of this key opens a new group
          }
          break;
        }
      }
    }
    if (target < 0) {
      groups.push_back({i});
      group_bytes.push_back(it.bytes);
      if (it.fusable && it.bytes <= threshold_bytes) open.push_back((int)groups.size() - 1);
    } else {
      groups[target].push_back(i);
      group_bytes[target] += it.bytes;
    }
  }
  return groups;
}

}  // namespace mxhorovod
