// Waiting on a nonblocking MPI request without burning a core: MPICH's blocking calls poll
// at full speed, which starves the model's threads (and the other ranks when there are more
// ranks than cores). We test, yield a few times, then sleep with a growing, capped pause.
#ifndef MXHOROVOD_OPS_MPI_WAIT_H_
#define MXHOROVOD_OPS_MPI_WAIT_H_

#include <mpi.h>

#include "common/status.h"

namespace mxhorovod {

struct WaitPolicy {
  int spins = 64;           // MPI_Test + sched_yield rounds before the first sleep
  int max_sleep_us = 200;   // cap of the exponential pause
  // Data-plane calls (after negotiation every rank is there): MPI's blocking calls, which
  // poll at full speed and reach mpi4py's speed. Off when ranks outnumber cores: a polling
  // rank would then steal the core of the peer it waits for.
  bool blocking_data = true;
};

// Sets the policy for this process (before the background thread starts).
void SetWaitPolicy(const WaitPolicy& p);
const WaitPolicy& GetWaitPolicy();
// Waits for *req; `what` names the operation in the error if MPI reports one.
Status WaitRequest(MPI_Request* req, const char* what);
// MPI's error text for a return code.
std::string MPIErrorString(int code);
// OK for MPI_SUCCESS, else "MPI error in <what>: <MPI's text>" (the data plane's wording).
Status CheckMPI(int rc, const char* what);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_MPI_WAIT_H_
