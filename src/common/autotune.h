// Autotuning (HOROVOD_AUTOTUNE=1): while the job runs, try values of the fusion threshold,
// the cycle time, the per-call slice size and the zero-copy size, score each by the bytes
// the global set reduced per second over a sample of training steps, and keep the best.
//
// Search: coordinate descent over a fixed grid (one parameter at a time, the others at
// their best so far), a deterministic and simpler stand-in for Horovod's Bayesian
// optimisation. A step is counted each time a tensor name seen in the current sample comes
// round again (a training loop repeats its names), so every rank counts the same steps
// from the identical response lists; rank 0 scores each sample and broadcasts the
// decision, so every rank switches to the same values at the same cycle.
#ifndef MXHOROVOD_COMMON_AUTOTUNE_H_
#define MXHOROVOD_COMMON_AUTOTUNE_H_

#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <unordered_set>
#include <vector>

#include "common.h"
#include "config.h"

namespace mxhorovod {

struct TunedParams {
  int64_t fusion_threshold;
  double cycle_time_ms;
  int64_t slice_bytes;
  int64_t zero_copy_bytes;
};

class Autotuner {
 public:
  // Reads HOROVOD_AUTOTUNE_LOG; the samples' sizes come from cfg (read at init()).
  // Starts from cfg's values.
  Autotuner(const Config& cfg, MPI_Comm comm, int rank);
  ~Autotuner();
  bool active() const { return !done_; }
  // After each cycle of the global set, with the responses it ran and their bytes.
  // Returns true when the parameters changed (read them with params()).
  bool Update(const std::vector<Response>& responses, int64_t bytes);
  const TunedParams& params() const { return current_; }

 private:
  void Log(const TunedParams& p, double score, const char* what);
  TunedParams Candidate(size_t dim, size_t index) const;
  MPI_Comm comm_;
  int rank_;
  int warmup_samples_, steps_per_sample_;
  FILE* log_ = nullptr;
  bool done_ = false;
  TunedParams best_, current_;
  double best_score_ = -1;
  size_t dim_ = 0, index_ = 0;   // parameter being tuned, candidate being tried
  int sample_ = 0;               // samples taken of the current candidate
  int steps_ = 0;
  int64_t bytes_ = 0;
  std::unordered_set<std::string> seen_;
  std::chrono::steady_clock::time_point sample_start_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_AUTOTUNE_H_
