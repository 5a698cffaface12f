// Negotiation, once per cycle, on the library's communicator: which submitted names are
// ready on every rank, as one ordered response list that is identical on all ranks.
//
// 1. New requests are looked up in the response cache. Hits wait as bits; misses (and
//    requests whose cached entry no longer matches) go to the coordinator.
// 2. One MPI_Allreduce(BAND) over [~flags | ~invalid bits | hit bits] tells every rank:
//    does anyone have uncached requests or want to shut down (OR, through the complements),
//    which cache entries must be evicted (OR), and which cached names are ready everywhere
//    (AND). A steady training loop whose names are all cached needs only this call.
// 3. Only if someone has uncached requests: gather them on rank 0 (coordinator), which
//    matches and checks them (MessageTable) and broadcasts the responses.
// Ready cached names come first in bit order, then the coordinator's list.
#ifndef MXHOROVOD_COMMON_CONTROLLER_H_
#define MXHOROVOD_COMMON_CONTROLLER_H_

#include <mpi.h>

#include <memory>
#include <vector>

#include "ops/mpi_wait.h"
#include "common.h"
#include "message_table.h"
#include "pending_hits.h"
#include "response_cache.h"
#include "stall_inspector.h"
#include "tensor_queue.h"

namespace mxhorovod {

struct CycleResult {
  std::vector<Response> responses;
  bool shutdown = false;   // some rank asked to shut down
  bool stall_shutdown = false;       // ... because a stall passed the shutdown time (rank 0)
  std::vector<int> shutdown_ranks;   // the ranks that asked (filled when shutdown is set)
};

class Controller {
 public:
  Controller(MPI_Comm comm, int rank, int size, size_t cache_capacity, TensorQueue* queue,
             const StallSettings& stall = StallSettings());
  Status ComputeResponses(bool shutdown_requested, CycleResult* out);
  // A process set other than the global one: stall reports name it (stall_inspector.h).
  void set_stall_scope(const std::string& scope, const std::vector<int>& job_ranks) {
    stall_.SetScope(scope, job_ranks);
  }
  // The communicator spans hosts: the negotiation's waits are bounded (ops/mpi_wait.h,
  // LinkWait; every rank's background thread negotiates at least every few hundred ms,
  // so a wait past the bound means a host or its link is gone).
  void set_link(const std::string& other_hosts) {
    link_.peers = other_hosts;
    link_.bytes = 0;
  }
  // Coordinator only: names some ranks have submitted and others not (stall reporting).
  std::vector<PendingName> PendingOnCoordinator() const { return table_.Pending(); }

 private:
  Status Coordinate(std::vector<Request> mine, std::vector<Response>* out);
  MPI_Comm comm_;
  int rank_, size_;
  TensorQueue* queue_;
  ResponseCache cache_;
  MessageTable table_;                   // used on rank 0 only
  PendingHits pending_hits_;
  std::vector<Request> resend_;  // hits whose entry was evicted: negotiate next cycle
  StallInspector stall_;
  std::vector<Response> stall_errors_;  // rank 0: answers for stalled names (stall shutdown)
  LinkWait link_;                       // peers "" on one host: no bound
  bool joined_ = false;       // this rank's join is pending
  bool join_active_ = false;  // some rank was joined at the last negotiation
  const LinkWait* Link() const { return link_.peers.empty() ? nullptr : &link_; }
};

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_CONTROLLER_H_
