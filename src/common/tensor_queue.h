// The hand-off between the threads that submit collectives (Python, MXNet engine workers)
// and the background thread: names in flight, submitted entries, and new requests.
// Every member is thread-safe; only the background thread takes entries out.
#ifndef MXHOROVOD_COMMON_TENSOR_QUEUE_H_
#define MXHOROVOD_COMMON_TENSOR_QUEUE_H_

#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common.h"

namespace mxhorovod {

class TensorQueue {
 public:
  // When the engine runs the operation: refuses a name already in flight (all or none
  // are reserved).
  Status Reserve(const std::vector<std::string>& names);
  void Release(const std::vector<std::string>& names);
  // When the engine runs the operation: entries become visible to the background thread.
  void Add(std::vector<TensorTableEntry>&& entries);
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
  // Takes every entry (shutdown): the caller fails them.
  std::vector<TensorTableEntry> TakeAll();

 private:
  std::mutex mu_;
  std::unordered_set<std::string> reserved_;
  struct Slot {
    TensorTableEntry entry;
    bool popped = false;  // its request was handed out by PopRequests
  };
  // Drops a slot that is taken before its request was popped (an error response naming a
  // name that arrived in this cycle): its pointer must not be handed out afterwards.
  void Unlist(Slot* slot);
  std::unordered_map<std::string, Slot> table_;
  std::vector<Slot*> new_slots_;  // into table_'s nodes (stable addresses), not yet popped
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_TENSOR_QUEUE_H_
