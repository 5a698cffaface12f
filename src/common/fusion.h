// Tensor fusion planning: which responses of one cycle go out together in one fusion
// buffer. Pure logic (no MPI, no memory), so it is tested on its own.
#ifndef MXHOROVOD_COMMON_FUSION_H_
#define MXHOROVOD_COMMON_FUSION_H_

#include <cstdint>
#include <vector>

#include "common.h"

namespace mxhorovod {

// One response's fusion key and payload size in bytes.
struct FusionItem {
  bool fusable;  // only allreduces are fused; anything else goes alone
  OpType op_type;
  DataType dtype;
  ReduceOp reduce_op;
  double prescale;
  double postscale;
  int64_t bytes;
};

// Groups item indices: items with equal keys join the open group of their key while its
// total stays within threshold_bytes (a larger item goes alone); order inside a group and
// order of groups (by first member) follow the input order, so all ranks plan the same.
std::vector<std::vector<int>> PlanFusion(const std::vector<FusionItem>& items,
                                         int64_t threshold_bytes);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_FUSION_H_
