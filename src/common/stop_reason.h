// Texts of the errors that pending operations get when mxhorovod stops, so a user sees
// which rank stopped it and which of their operations were cut short.
#ifndef MXHOROVOD_COMMON_STOP_REASON_H_
#define MXHOROVOD_COMMON_STOP_REASON_H_

#include <string>
#include <vector>

#include "common.h"

namespace mxhorovod {

// "a peer rank shut down mxhorovod (rank 1: hvd.shutdown() or process exit) while this rank
// was waiting" (ranks empty: no rank named).
std::string PeerShutdownReason(const std::vector<int>& ranks);
// reason + "; pending on this rank: allreduce 'a', broadcast 'b'" (at most 10 names, then
// the count), or reason alone when nothing is pending.
std::string WithPendingNames(const std::string& reason, const std::vector<TensorTableEntry>& entries);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_STOP_REASON_H_
