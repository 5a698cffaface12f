// The timeline: a Chrome trace event file (JSON array format; chrome://tracing and Perfetto
// open it) of what the core did with every tensor, recorded on rank 0 as in Horovod.
//
// One row ("process" in trace terms) per tensor name. On each row, per use of the name:
//   NEGOTIATE_<OP>   from the first readiness seen by rank 0 to the agreement that every rank
//                    is ready. Negotiated through the coordinator: one instant event per rank,
//                    named by the rank ("0", "1", ...), when rank 0 received that rank's
//                    request. Agreed through the response cache (args.via = "response
//                    cache"): only rank 0's own readiness is known.
//   <OP>             (ALLREDUCE, BROADCAST, ALLGATHER, ALLTOALL, REDUCESCATTER; args.dtype) from the agreement
//                    to completion on rank 0, holding the activities:
//     QUEUE                      waiting behind the collectives ahead of it in the cycle
//     MEMCPY_IN_FUSION_BUFFER    copy (and prescale) into the fusion buffer (fused groups)
//     MPI_ALLREDUCE, MPI_BCAST, MPI_ALLGATHER, MPI_ALLTOALL, MPI_REDUCE_SCATTER   the MPI call(s)
//     MEMCPY_OUT_FUSION_BUFFER   (postscale and) copy out of the fusion buffer
//   ERROR            instant event with args.error, for a negotiated error.
// With mark_cycles, an instant CYCLE_START (global scope) marks each cycle that ran
// collectives. Timestamps are microseconds since the timeline started (steady clock).
//
// Cost: the hooks are inline; when no timeline is recorded each is one relaxed atomic load
// and a predictable branch. When recording, a hook stamps the time and appends the event to
// a vector under a mutex that only the writer thread contends for; the writer thread
// formats and writes the JSON, so the background thread never touches the file.
#ifndef MXHOROVOD_COMMON_TIMELINE_H_
#define MXHOROVOD_COMMON_TIMELINE_H_

#include <pthread.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace mxhorovod {

// Activity names, as in Horovod's timeline.
constexpr const char* kActivityQueue = "QUEUE";
constexpr const char* kActivityMemcpyIn = "MEMCPY_IN_FUSION_BUFFER";
constexpr const char* kActivityMemcpyOut = "MEMCPY_OUT_FUSION_BUFFER";
// MPI_ALLREDUCE, MPI_BCAST, MPI_ALLGATHER, MPI_ALLTOALL or MPI_REDUCE_SCATTER.
const char* MPIActivityName(OpType op);
// ALLREDUCE, BROADCAST, ALLGATHER, ALLTOALL, REDUCESCATTER (Horovod's response type names).
const char* OpSpanName(OpType op);

class Timeline {
 public:
  static Timeline& Get();  // one per process, never destroyed

  // Truncates `path`, writes the opening bracket and starts the writer thread. Fails
  // (InvalidArgument naming the path and the reason) when the file cannot be opened, or
  // (PreconditionError) when a timeline is already being recorded.
  Status Start(const std::string& path, bool mark_cycles);
  // Writes what is pending, closes the spans still open, writes the closing bracket and
  // closes the file. Idempotent; safe from any thread.
  void Stop();
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  std::string path();
  // For a fatal signal's handler: waits, at most limit_ms, until the writer has put on disk
  // every event recorded before the call (a scheduler's SIGTERM, a crash: the last events
  // are the ones that show what happened). Async-signal-safe (atomics, pthread_self,
  // nanosleep); returns at once when no timeline is recorded or when called on the writer
  // thread.
  void AwaitFlushInSignal(int limit_ms);

  // --- hooks (called by the background thread) ---
  // Coordinator: `rank`'s request for `name` arrived (opens NEGOTIATE_<OP> if needed).
  void NegotiateRankReady(const std::string& name, OpType op, int rank) {
    if (enabled()) Record(kReady, name, OpSpanName(op), rank);
  }
  // Rank 0's own request is a response cache hit, waiting for the bit agreement.
  void NegotiateCached(const std::string& name, OpType op) {
    if (enabled()) Record(kCached, name, OpSpanName(op), 0);
  }
  // The cycle's agreed responses: ends their negotiation, opens <OP> + QUEUE (or records
  // ERROR) for each name.
  void Responses(const std::vector<Response>& responses) {
    if (enabled()) RecordResponses(responses);
  }
  void ActivityStart(const std::string& name, const char* activity) {
    if (enabled()) Record(kActivityStart, name, activity, 0);
  }
  void ActivityEnd(const std::string& name) {
    if (enabled()) Record(kActivityEnd, name, nullptr, 0);
  }
  void ActivityStartAll(const std::vector<TensorTableEntry*>& entries, const char* activity) {
    if (enabled()) RecordAll(kActivityStart, entries, activity);
  }
  void ActivityEndAll(const std::vector<TensorTableEntry*>& entries) {
    if (enabled()) RecordAll(kActivityEnd, entries, nullptr);
  }
  // The tensor completed (successfully or not) on rank 0: closes <OP>.
  void OpEnd(const std::string& name) {
    if (enabled()) Record(kOpEnd, name, nullptr, 0);
  }
  void MarkCycle() {
    if (enabled() && mark_cycles_) Record(kCycle, std::string(), nullptr, 0);
  }
  // The process set whose cycle the background thread runs now (0: the global set). Rows
  // of the other sets are "<name> [process set <id>]" and their ranks are shown in the
  // job's numbering (job_ranks[set rank]). Background thread only; job_ranks must live
  // until the next call.
  void SetProcessSet(int32_t id, const std::vector<int>* job_ranks) {
    set_id_ = id;
    set_ranks_ = job_ranks;
  }

 private:
  enum Kind : uint8_t { kReady, kCached, kNegotiateEnd, kError, kOpStart, kActivityStart,
                        kActivityEnd, kOpEnd, kCycle };
  struct Event {
    int64_t ts_us;
    Kind kind;
    int32_t rank;
    const char* label;   // static string: span or activity name
    std::string name;    // tensor name
    std::string text;    // error text, or the dtype of an operation
  };
  // Writer-side state of one row: which spans are open, so the file stays well nested even
  // when recording starts or stops in the middle of an operation.
  struct Row {
    int pid = 0;
    bool negotiating = false;
    bool op_open = false;
    int activities = 0;
  };

  Timeline() = default;
  int64_t Now() const;
  std::string RowName(const std::string& name) const;
  int JobRank(int set_rank) const;
  void Record(Kind kind, const std::string& name, const char* label, int rank);
  void RecordAll(Kind kind, const std::vector<TensorTableEntry*>& entries, const char* label);
  void RecordResponses(const std::vector<Response>& responses);
  void Push(std::vector<Event>&& events);
  void WriterLoop();
  void Write(const Event& e);
  Row& RowOf(const std::string& name);
  void Emit(const std::string& json);
  void Close(Row& row, int64_t ts, bool negotiation_too);

  std::atomic<bool> enabled_{false};
  bool mark_cycles_ = false;
  int32_t set_id_ = 0;                         // background thread only
  const std::vector<int>* set_ranks_ = nullptr;
  std::chrono::steady_clock::time_point start_;

  std::mutex control_mu_;        // serializes Start/Stop
  std::mutex mu_;                // guards pending_, accepting_, stop_
  std::condition_variable cv_;
  std::vector<Event> pending_;
  bool accepting_ = false;
  bool stop_ = false;
  std::thread writer_;
  pthread_t writer_handle_{};              // writer_'s, for AwaitFlushInSignal
  std::atomic<uint64_t> recorded_{0};      // events accepted by Push
  std::atomic<uint64_t> written_{0};       // events the writer has written and flushed

  // Writer thread only (and Stop after the join).
  std::string path_;
  FILE* file_ = nullptr;
  bool first_event_ = true;
  int64_t last_ts_ = 0;
  std::unordered_map<std::string, Row> rows_;
  int next_pid_ = 1;
};

// Escapes a string for a JSON string literal (quotes, backslashes, control characters).
std::string JsonEscape(const std::string& s);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_TIMELINE_H_
