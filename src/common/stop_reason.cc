#include "stop_reason.h"

#include <algorithm>

#include "stall_inspector.h"

namespace mxhorovod {

std::string PeerShutdownReason(const std::vector<int>& ranks) {
  std::string who = ranks.empty() ? ""
                    : ranks.size() == 1 ? "rank " + std::to_string(ranks[0]) + ": "
                                        : "ranks " + RankList(ranks) + ": ";
  // Said to the operations pending here and to every later call: "while this rank was
  // waiting" misled the latter (a rank of a process set that the peer was not in).
  return "a peer rank shut down mxhorovod (" + who +
         "hvd.shutdown() or process exit), which stops it on every rank (as in Horovod): "
         "every rank must stay until the job's last collective, those of process sets it "
         "is not in included";
}

std::string WithPendingNames(const std::string& reason, const std::vector<TensorTableEntry>& entries) {
  constexpr size_t kMaxListed = 10;
  if (entries.empty()) return reason;
  std::vector<std::string> names;
  for (const auto& e : entries) {
    names.push_back(std::string(OpTypeName(e.request.op_type)) + " '" + e.request.name + "'");
  }
  std::sort(names.begin(), names.end());  // the queue's order is arbitrary
  std::string out = reason + "; pending on this rank: ";
  for (size_t i = 0; i < names.size() && i < kMaxListed; ++i) out += (i ? ", " : "") + names[i];
  if (entries.size() > kMaxListed) out += ", ... (" + std::to_string(entries.size()) + " in all)";
  return out;
}

}  // namespace mxhorovod
