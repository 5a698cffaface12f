// The stall inspector (Horovod's): finds names that some ranks have submitted and others not,
// for longer than HOROVOD_STALL_CHECK_TIME_SECONDS (default 60).
//
// - Every rank: a response cache hit only waits for a bit agreement, which cannot say who is
//   missing. A hit waiting longer than the check time is handed to the coordinator instead
//   (its cache entry is evicted on every rank, so the peers' requests follow it there).
// - Rank 0 (coordinator): logs a warning listing the waiting names, how long they waited, the
//   ranks missing and the ranks that submitted, and repeats it every check time while the
//   stall lasts. Past HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (default 0: never, as in Horovod)
//   it answers every waiting name with an error response naming it and its missing ranks,
//   and asks every rank to shut mxhorovod down, so no rank waits forever.
// In a process set other than the global one, the set's first rank reports, with the set
// named and ranks in the job's numbering; its stall shutdown fails the set's waiting
// operations but stops nothing (only the global set reaches every rank to agree on a stop).
// HOROVOD_STALL_CHECK_DISABLE=1 (or a check time of 0) turns all of it off. As in Horovod, a
// shutdown time below the check time is ignored with a warning.
// Pure logic and clocks, no MPI: the controller calls it and moves the results.
#ifndef MXHOROVOD_COMMON_STALL_INSPECTOR_H_
#define MXHOROVOD_COMMON_STALL_INSPECTOR_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "message_table.h"
#include "pending_hits.h"

namespace mxhorovod {

struct StallSettings {
  bool enabled = true;        // !HOROVOD_STALL_CHECK_DISABLE and a check time > 0
  double check_s = 60.0;      // HOROVOD_STALL_CHECK_TIME_SECONDS
  double shutdown_s = 0.0;    // HOROVOD_STALL_SHUTDOWN_TIME_SECONDS (0: never)
};

class StallInspector {
 public:
  using Clock = std::chrono::steady_clock;
  // rank: only rank 0 logs (the settings warning at start, the stall reports).
  StallInspector(const StallSettings& settings, int rank, int size);

  // Once per cycle, before the hooks below: one clock read for the whole cycle.
  void BeginCycle() {
    if (settings_.enabled) now_ = Clock::now();
  }
  // A request of this rank became a pending response cache hit at `bit`.
  void HitPending(int bit) {
    if (settings_.enabled) hit_since_[bit] = now_;
  }
  // Bits of pending hits that waited longer than the check time (checked a few times per
  // check time, not every cycle). The caller renegotiates them through the coordinator.
  std::vector<int> StalledHits(const PendingHits& pending);

  // Coordinator: whether a check of the coordinator's table is due this cycle (so the
  // pending list is built only then).
  bool CoordinatorCheckDue() const { return settings_.enabled && now_ >= next_table_check_; }
  // Logs the warning when due. Returns true when the stall shutdown time has passed: then
  // *errors holds one error response per waiting name.
  bool CheckCoordinator(const std::vector<PendingName>& pending, std::vector<Response>* errors);

  // The error text of every other operation that fails when a stall shuts mxhorovod down.
  static std::string ShutdownReason(const StallSettings& settings);

  // For a process set other than the global one: its description ("process set 2 (ranks
  // [1, 2])") and the job's rank of each of its ranks.
  void SetScope(const std::string& scope, const std::vector<int>& job_ranks) {
    scope_ = scope;
    job_ranks_ = job_ranks;
  }
  // Whether a stall shutdown stops mxhorovod (the global set) or only fails operations.
  bool stops_job() const { return scope_.empty(); }

 private:
  std::string Describe(const PendingName& p) const;
  // For stalled names of one call ('k', 'k.<i>') submitted by
  // disjoint ranks: name -> a sentence saying the ranks made different calls under 'k';
  // for an allgather's or alltoall's size exchange stalled beside another call's name of
  // disjoint ranks: a sentence saying the ranks made their calls in different orders.
  std::unordered_map<std::string, std::string> SameCallHints(
      const std::vector<const PendingName*>& stalled) const;
  std::vector<int> JobRanks(const std::vector<int>& set_ranks) const;
  std::string Prefix() const { return scope_.empty() ? "" : scope_ + ": "; }
  StallSettings settings_;
  std::string scope_;              // empty: the global set
  std::vector<int> job_ranks_;
  int size_;
  Clock::duration check_, period_;
  Clock::time_point now_{}, next_hit_check_{}, next_table_check_{}, last_warning_{};
  bool warned_ = false;
  std::unordered_map<int, Clock::time_point> hit_since_;
};

// Formats ranks as "1, 2, 5" (at most `max_listed`, then "... (N in all)").
std::string RankList(const std::vector<int>& ranks, size_t max_listed = 16);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_STALL_INSPECTOR_H_
