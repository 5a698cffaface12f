// The local arithmetic of hvd.SyncBatchNorm as MXNet engine operations that take no shared
// resource (mxhorovod/training/sync_batch_norm.py calls them from its custom operator).
//
// Why not MXNet's own operators: a reduction (sum), a scalar multiplication or a concat
// takes one of the engine's shared temporary-space variables (MXNET_CPU_TEMP_COPY of them,
// handed out in turn). An operation that waits for a collective and holds such a variable
// blocks every later operation given the same one. Two layers whose forwards run in
// different orders on two ranks then block each other's way to their collectives: each
// rank's core holds one of the two names, and both wait for ever. These operations only
// read and write the arrays they are given, so a layer's collective always reaches the
// core once its input is ready (docs/design.md, "SyncBatchNorm").
//
// Arrays: x, y, dy and dx are dense CPU arrays of one dtype T (float16, float32 or
// float64); gamma, beta, the running and saved statistics have C elements of dtype A
// (float32, or float64 when T is float64); `stats` (1 + 2C) and `grad_sums` (2C) are
// float64. x is seen as (outer, C, inner) with C its `axis` dimension.
#ifndef MXHOROVOD_MXNET_SYNC_BN_OP_H_
#define MXHOROVOD_MXNET_SYNC_BN_OP_H_

#include <string>

#include "common/status.h"

namespace mxhorovod {
namespace mx {

// What each step reads and writes (handles; nullptr where the step does not use one).
struct SyncBNArrays {
  void* x = nullptr;
  void* dy = nullptr;
  void* gamma = nullptr;
  void* beta = nullptr;
  void* mean = nullptr;       // forward: the running mean (updated); backward: the mean used
  void* var = nullptr;        // the same for the variance
  void* stats = nullptr;      // count, sum and sum of squares (see kStats)
  void* grad_sums = nullptr;  // sum of dy and of dy * x_hat per channel
  void* saved_mean = nullptr; // forward with batch statistics: the batch's mean and variance
  void* saved_var = nullptr;
  void* out = nullptr;        // y (forward) or dx (input gradient)
  void* gamma_grad = nullptr;
  void* beta_grad = nullptr;
};

// MXNet's OpReqType as custom operators name it: null, write (or inplace), add.
enum class SyncBNReq : int { kNull = 0, kWrite = 1, kAdd = 2 };

struct SyncBNParams {
  int axis = 1;
  double eps = 1e-5;
  float momentum = 0.9f;
  bool fix_gamma = false;
  bool batch_stats = true;  // normalize with the batch's statistics (else the running ones)
  SyncBNReq out_req = SyncBNReq::kWrite;
  SyncBNReq gamma_req = SyncBNReq::kNull;
  SyncBNReq beta_req = SyncBNReq::kNull;
};

enum class SyncBNStep : int {
  // stats[0] = n (this rank's elements per channel), stats[1 + c] = n * mean_c,
  // stats[1 + C + c] = M2_c + n * mean_c^2 (M2: squared deviations from this rank's mean,
  // a second pass, in float64): summed over the ranks they give count, sum and sum of
  // squares. Reads x; writes stats.
  kStats = 0,
  // y = x * scale + shift, scale = gamma / sqrt(var + eps), shift = beta - mean * scale.
  // batch_stats: mean and var (biased) from the summed stats, written to saved_mean and
  // saved_var, and the running ones updated (running = running * momentum + stat * (1 -
  // momentum)); else the running mean and var. gamma is 1 under fix_gamma.
  kForward = 1,
  // grad_sums = (sum of dy, sum of dy * x_hat), x_hat = (x - mean) / sqrt(var + eps); and
  // beta_grad = sum of dy, gamma_grad = sum of dy * x_hat (0 under fix_gamma), per req.
  kGradSums = 2,
  // dx = (dy - sum(dy) / N - x_hat * sum(dy * x_hat) / N) * gamma / sqrt(var + eps), with
  // the summed grad_sums and N = stats[0] (batch_stats); else dx = dy * gamma / sqrt(var + eps).
  kGradInput = 3,
};

// Checks the arrays (InvalidArgument naming `layer` and the array) and pushes the step: an
// engine operation on the CPU worker that reads and writes only those arrays. Returns at
// once. A failure when it runs (an array in MKLDNN's layout) is raised by MXNet at the
// next read of an output.
Status PushSyncBN(SyncBNStep step, const SyncBNArrays& arrays, const SyncBNParams& params,
                  const std::string& layer);

}  // namespace mx
}  // namespace mxhorovod

#endif  // MXHOROVOD_MXNET_SYNC_BN_OP_H_
