// The hand-off between the threads that submit collectives (Python, MXNet engine workers)
// and the background thread: names in flight, submitted entries, and new requests.
// Every member is thread-safe; only the background thread takes entries out.
#ifndef MXHOROVOD_COMMON_TENSOR_QUEUE_H_
#define MXHOROVOD_COMMON_TENSOR_QUEUE_H_

#include <functional>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common.h"
#include "spare_nodes.h"

namespace mxhorovod {

class TensorQueue {
 public:
  // Call order of names. The ranks match collectives by name, so calls of one name must
  // reach the core in the order they were made: the n-th call of a name on every rank is
  // then the n-th on the others, whatever order the engine runs them in (an operation
  // whose input is ready first may run first; engine order differs between ranks). Each
  // operation takes a ticket and joins the line of each of its names at the call
  // (Register, which returns the ticket); it may hand its tensors to the core once it is first in every line
  // (Admit, when the engine runs it); Finish takes it out of its lines when it completes.
  // A training loop's reuse of one name per gradient is first in line anyway (the engine
  // runs step k+1's operation on an array after step k's), and a name's line is erased
  // when empty.
  uint64_t Register(const std::vector<std::string>& names);
  // True: first in every line, run it now. Else `run` is kept and handed out by the Finish
  // that puts the operation first in every line.
  bool Admit(const std::vector<std::string>& names, uint64_t ticket, std::function<void()> run);
  // Takes the operation out of its lines (first in them once admitted; from the middle if
  // its push failed); returns the waiting operations now admitted, for the caller to run
  // (TensorQueue::RunAdmitted, in ticket order, no lock held).
  std::vector<std::function<void()>> Finish(const std::vector<std::string>& names, uint64_t ticket);
  // Runs what Finish admitted, on this thread; called again from inside one of them (the
  // admitted operation failed at once and finished), it only adds to the list: no nesting.
  static void RunAdmitted(std::vector<std::function<void()>> admitted);
  // When the engine runs the operation: entries become visible to the background thread.
  // False (nothing taken) once TakeAll has closed the queue: the caller fails them.
  bool Add(std::vector<TensorTableEntry>&& entries);
  // Background thread: the requests added since the last call, in submission order. They
  // point into the queued entries: valid until the entry is taken (only the background
  // thread takes entries out).
  void PopRequests(std::vector<Request*>* out);
  // Background thread: the entry for a name (nullptr if absent); valid until Take.
  TensorTableEntry* Find(const std::string& name);
  bool Take(const std::string& name, TensorTableEntry* out);
  // Takes the entries of many names under one lock: out[i] is names[i]'s entry, found[i]
  // says whether it was queued.
  void TakeMany(const std::vector<const std::string*>& names, std::vector<TensorTableEntry>* out,
                std::vector<char>* found);
  // No entry waiting or running (new requests included).
  bool Empty();
  // Every operation registered so far has finished (no line left); `finished` (if given)
  // receives how many operations have finished so far.
  bool Idle(uint64_t* finished = nullptr);
  // Names with a line kept (in flight, or kept empty for their next call): bounded by the
  // sweeps whatever the number of distinct names (tests).
  size_t Lines();
  // Takes every entry and closes the queue to new ones (shutdown, set removed): the caller
  // fails them.
  std::vector<TensorTableEntry> TakeAll();

 private:
  std::mutex mu_;
  bool FirstInLines(const std::vector<std::string>& names, uint64_t ticket) const;
  uint64_t next_ticket_ = 1;
  uint64_t finished_ = 0;  // Finish calls so far
  bool closed_ = false;    // TakeAll ran: Add refuses
  struct Line {  // tickets in call order; those before `head` have finished
    std::vector<uint64_t> tickets;
    size_t head = 0;
    uint64_t used = 0;  // sweeps_ when a ticket last joined it
    bool empty() const { return head == tickets.size(); }
    uint64_t front() const { return tickets[head]; }
  };
  // By name. A line that empties is kept for its name's next call (a training step calls
  // the same names again: no map node and vector to allocate here and free on the
  // background thread, per call); Sweep erases the empty lines that no call joined since
  // the sweep before, so names used once (a step number in the name) do not pile up.
  std::unordered_map<std::string, Line> lines_;
  size_t active_lines_ = 0;           // lines not empty
  uint64_t sweeps_ = 0;
  size_t finished_since_sweep_ = 0;  // names of the calls finished since the last sweep
  size_t kept_at_sweep_ = 0;  // lines_.size() after the last sweep
  void Sweep();
  struct Waiting {
    std::vector<std::string> names;
    std::function<void()> run;
  };
  std::unordered_map<uint64_t, Waiting> waiting_;  // by ticket: not admitted yet
  struct Slot {
    TensorTableEntry entry;
    bool popped = false;  // its request was handed out by PopRequests
  };
  // Drops a slot that is taken before its request was popped (an error response naming a
  // name that arrived in this cycle): its pointer must not be handed out afterwards.
  void Unlist(Slot* slot);
  std::unordered_map<std::string, Slot> table_;
  std::vector<Slot*> new_slots_;  // into table_'s nodes (stable addresses), not yet popped
  // table_'s nodes: added by the calling threads, taken by the background thread.
  SpareNodes<std::unordered_map<std::string, Slot>> spare_{4096};  // ~1 MB at most
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_TENSOR_QUEUE_H_
