// The coordinator's table (rank 0): requests by name until every rank has submitted one,
// then one response per name, checked for agreement. Pure logic, no MPI.
#ifndef MXHOROVOD_COMMON_MESSAGE_TABLE_H_
#define MXHOROVOD_COMMON_MESSAGE_TABLE_H_

#include <chrono>
#include <list>
#include <set>
#include <string>
#include <utility>
#include <unordered_map>
#include <vector>

#include "common.h"

namespace mxhorovod {

// A name some ranks have submitted and others not yet (stall inspection).
struct PendingName {
  std::string name;
  OpType op_type = OpType::kAllreduce;
  std::vector<int> ranks;                        // ranks that have submitted it, ascending
  std::chrono::steady_clock::time_point since;   // when the coordinator first received it
};

class MessageTable {
 public:
  explicit MessageTable(int size) : size_(size) {}
  // Adds the requests of one rank. Names that now have a request from every rank are
  // appended to *ready as responses (kError when the ranks disagree), in the order they
  // became complete, so every rank that executes the list runs the same collectives.
  void Add(const std::vector<Request>& reqs, std::vector<Response>* ready);
  // Names still waiting, in first-arrival order, with the ranks that have submitted them;
  // then a join in progress ("join": the ranks that have joined, since the first did).
  std::vector<PendingName> Pending() const;
  bool Contains(const std::string& name) const { return table_.count(name) > 0; }
  // Drops a waiting name (the coordinator answered it with an error: stall shutdown).
  void Erase(const std::string& name);
  // End of a negotiation round: a group's tensors are queued together, so a rank's requests
  // of one group reach the coordinator in one round; drops not met by then are forgotten.
  void EndRound() { drop_.clear(); }
  size_t size() const { return table_.size(); }
  // Ranks that have called join() and wait for the others (none: empty).
  std::vector<int> Joined() const;

 private:
  Response Build(const std::vector<Request>& reqs) const;
  // A rank's join request: from now on the names waiting only for joined ranks are ready,
  // their Sum and Average allreduces with the joined ranks adding zeros, the other
  // collectives failing with an error that names the joined ranks. Once every rank has
  // joined, the join's answer (the rank that joined last) ends it.
  void AddJoin(const Request& r, std::vector<Response>* ready);
  // Whether every rank has submitted the slot's name or joined.
  bool Complete(const std::vector<Request>& slot) const;
  // The response to a complete slot (Build over the submitted requests, then the joined
  // ranks' part), erasing the name.
  Response Finish(const std::string& name);
  std::vector<char> joined_;     // per rank: has joined (a join is in progress)
  int joined_count_ = 0;
  int last_joined_ = -1;
  std::chrono::steady_clock::time_point join_since_;  // when the first rank joined
  // After a group-size mismatch on '<base>.0': the group's tensors that only some ranks
  // have ('<base>.<k>', k >= the smallest group, k >= 1: an empty call's request stands in
  // for its tensor 0) are named in the error, so the ranks that
  // submitted them fail them too; their requests are dropped here, now or when they come.
  void DropGroupExtras(const std::vector<Request>& reqs, Response* resp);
  int size_;
  std::set<std::pair<std::string, int>> drop_;  // (name, rank) whose request is ignored once
  std::unordered_map<std::string, std::vector<Request>> table_;
  // First-arrival order, for Pending(); a list, each name's position kept with it: a name
  // is erased from anywhere in O(1) (a vector searched for it took O(names waiting) per
  // completion: 80,000 calls of distinct names queued while a rank was late took 8 s to
  // complete after it caught up, 20,000 took 0.2 s).
  std::list<std::string> order_;
  struct Arrival {
    std::chrono::steady_clock::time_point since;
    std::list<std::string>::iterator pos;  // in order_
  };
  std::unordered_map<std::string, Arrival> since_;
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_MESSAGE_TABLE_H_
