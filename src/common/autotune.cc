#include "autotune.h"

#include <cerrno>
#include <cstring>

#include "logging.h"
#include "own_file.h"

namespace mxhorovod {
namespace {

const std::vector<double> kFusionMiB = {4, 16, 64, 128};
const std::vector<double> kCycleMs = {0.5, 1, 2, 5};
const std::vector<double> kSliceMiB = {1, 4, 16, 64};
const std::vector<double> kZeroCopyKiB = {16, 64, 256, 1024};
const std::vector<double>* const kGrid[] = {&kFusionMiB, &kCycleMs, &kSliceMiB, &kZeroCopyKiB};
constexpr size_t kDims = 4;
// New names without one coming round that count as a step (more than a step of any model
// has: 16,384 gradients).
constexpr size_t kMaxStepNames = 16384;

}  // namespace

Autotuner::Autotuner(const Config& cfg, MPI_Comm comm, int rank) : comm_(comm), rank_(rank) {
  warmup_samples_ = cfg.autotune_warmup_samples;
  steps_per_sample_ = cfg.autotune_steps_per_sample;
  best_ = current_ = {cfg.fusion_threshold, cfg.cycle_time_ms, cfg.slice_bytes, cfg.zero_copy_bytes};
  const char* path = std::getenv("HOROVOD_AUTOTUNE_LOG");
  if (rank_ == 0 && path && *path) {
    std::string why;
    log_ = OpenOwnFileForWriting(path, &why);
    if (log_) {
      std::fprintf(log_, "fusion_threshold_bytes,cycle_time_ms,slice_bytes,zero_copy_bytes,"
                         "score_bytes_per_sec,event\n");
    } else {
      // As HOROVOD_TIMELINE's: a file that cannot be made (a missing directory, a
      // read-only one) was skipped without a word, and the user found no log after the job.
      LogError(std::string("HOROVOD_AUTOTUNE_LOG: cannot open the autotune log file '") +
               path + "': " + why + "; autotuning without a log");
    }
  }
  current_ = Candidate(0, 0);
  sample_start_ = std::chrono::steady_clock::now();
}

Autotuner::~Autotuner() {
  if (log_) std::fclose(log_);
}

TunedParams Autotuner::Candidate(size_t dim, size_t index) const {
  TunedParams p = best_;
  const double v = (*kGrid[dim])[index];
  switch (dim) {
    case 0: p.fusion_threshold = (int64_t)(v * (1 << 20)); break;
    case 1: p.cycle_time_ms = v; break;
    case 2: p.slice_bytes = (int64_t)(v * (1 << 20)); break;
    case 3: p.zero_copy_bytes = (int64_t)(v * 1024); break;
  }
  return p;
}

void Autotuner::Log(const TunedParams& p, double score, const char* what) {
  if (!log_) return;
  std::fprintf(log_, "%lld,%g,%lld,%lld,%.6g,%s\n", (long long)p.fusion_threshold, p.cycle_time_ms,
               (long long)p.slice_bytes, (long long)p.zero_copy_bytes, score, what);
  std::fflush(log_);
}

bool Autotuner::Update(const std::vector<Response>& responses, int64_t bytes) {
  if (done_) return false;
  bytes_ += bytes;
  for (const auto& r : responses) {
    for (const auto& n : r.names) {
      if (!seen_.insert(n).second) {  // a name came round again: one more step
        ++steps_;
        seen_.clear();
        seen_.insert(n);
      } else if (seen_.size() >= kMaxStepNames) {
        // Names that never come round (unnamed calls are numbered, or a step number in the
        // name) never end a step: every name was kept, without bound, and no sample was
        // ever taken. So many new names count as one step. The same on every rank (every
        // rank sees the same responses).
        ++steps_;
        seen_.clear();
      }
    }
  }
  if (steps_ < steps_per_sample_) return false;
  // End of a sample, at the same cycle on every rank: rank 0 scores it and decides.
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - sample_start_).count();
  double msg[2] = {secs > 0 ? bytes_ / secs : 0, 0};
  MPI_Bcast(msg, 2, MPI_DOUBLE, 0, comm_);
  const double score = msg[0];
  steps_ = 0;
  bytes_ = 0;
  seen_.clear();
  sample_start_ = std::chrono::steady_clock::now();
  if (++sample_ <= warmup_samples_) {
    Log(current_, score, "warmup");
    return false;
  }
  Log(current_, score, "sample");
  if (score > best_score_) {
    best_score_ = score;
    best_ = current_;
  }
  sample_ = 0;
  if (++index_ >= kGrid[dim_]->size()) {
    index_ = 0;
    if (++dim_ >= kDims) {
      done_ = true;
      current_ = best_;
      Log(best_, best_score_, "best");
      return true;
    }
  }
  current_ = Candidate(dim_, index_);
  return true;
}

}  // namespace mxhorovod
