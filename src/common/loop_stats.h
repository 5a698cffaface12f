// Where the background thread's time goes, per stage, summed since init(): for
// benchmarks/call_cost.py (the cost of one collective call, stage by stage). Timed per
// cycle and per fusion group, never per tensor: two clock reads per stage, about 40 ns
// per cycle. Written by the background thread only; read by any thread.
#ifndef MXHOROVOD_COMMON_LOOP_STATS_H_
#define MXHOROVOD_COMMON_LOOP_STATS_H_

#include <atomic>
#include <chrono>
#include <cstdint>

namespace mxhorovod {

struct LoopStats {
  std::atomic<uint64_t> cycles{0};        // negotiation rounds (every process set's)
  std::atomic<uint64_t> tensors{0};       // tensors answered (completed or failed)
  std::atomic<uint64_t> groups{0};        // executor runs (one per fusion group)
  std::atomic<uint64_t> negotiate_ns{0};  // ComputeResponses: the cache bits, the
                                          // coordinator round, and the wait for the peers
  std::atomic<uint64_t> plan_ns{0};       // taking the entries, planning fusion groups
  std::atomic<uint64_t> execute_ns{0};    // the executor: fusion copies, MPI, reductions
  std::atomic<uint64_t> complete_ns{0};   // the callbacks: MXNet's completion, name lines
  std::atomic<uint64_t> sleep_ns{0};      // waiting for new work between cycles
  void Reset() {
    for (auto* c : {&cycles, &tensors, &groups, &negotiate_ns, &plan_ns, &execute_ns,
                    &complete_ns, &sleep_ns}) {
      c->store(0, std::memory_order_relaxed);
    }
  }
};

// The process's one LoopStats (never destroyed).
LoopStats& Stats();

// Nanoseconds of the steady clock (a vDSO read: ~20 ns on a TSC clock).
inline uint64_t NowNs() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Adds `ns` to a counter only the background thread writes (no locked instruction).
inline void AddTo(std::atomic<uint64_t>& c, uint64_t ns) {
  c.store(c.load(std::memory_order_relaxed) + ns, std::memory_order_relaxed);
}

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_LOOP_STATS_H_
