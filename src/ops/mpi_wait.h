// Waiting on a nonblocking MPI request without burning a core: MPICH's blocking calls poll
// at full speed, which starves the model's threads (and the other ranks when there are more
// ranks than cores). We test (data calls: back to back for 50 us first), yield a few times,
// then sleep with a growing, capped pause.
// The sleep is on a doorbell shared by the ranks of one host (a futex word in /dev/shm):
// a rank that starts or finishes its part of a collective rings it, so a peer waiting for
// that part wakes at once instead of at the end of its pause, and a rank that waits long for
// a late peer (the rank ahead in backward) wakes rarely.
#ifndef MXHOROVOD_OPS_MPI_WAIT_H_
#define MXHOROVOD_OPS_MPI_WAIT_H_

#include <mpi.h>

#include <cstdint>
#include <string>

#include "common/status.h"

namespace mxhorovod {

struct WaitPolicy {
  int spins = 64;           // MPI_Test + sched_yield rounds before the first sleep
  int max_sleep_us = 200;   // cap of the exponential pause
  // Cap for small control messages (negotiation, handshakes) when every rank of the job
  // can ring every other one (one host, doorbell open everywhere): a ring ends the pause,
  // so the cap only bounds a missed ring (a step of a multi-round algorithm).
  int bell_sleep_us = 1000;
  // Data-plane calls (after negotiation every rank is there): MPI's blocking calls, which
  // poll at full speed until the peers come (MXHOROVOD_BLOCKING_DATA=1), or nonblocking
  // ones waited here (the default): a peer's background thread may be off its core for
  // milliseconds when the ranks' model threads fill the cores, and a blocking call burnt
  // that time on this rank's core (0.3-0.7 ms per MNIST step on 2 cores); here a wait also
  // sees a peer of its host that has ended (peer_watch.h), which a blocking call never
  // returns to do.
  bool blocking_data = false;
  // A nonblocking data call first tests back to back for this long, with no yield: a peer
  // that is on time completes within it, as fast as a blocking call (small allreduces
  // measured as fast or faster, 2026-12-03); a late one costs no more than this before the
  // yield-then-sleep rounds. 0 when ranks outnumber cores (host_cores.h).
  int data_busy_us = 50;
  // HOROVOD_STALL_CHECK_TIME_SECONDS (0 when the check is off): a wait longer than this
  // is logged, again every such time, and its end too. A rank whose whole process stopped
  // (SIGSTOP, a debugger, a host that stopped answering) never reaches the stall
  // inspector's tables: its peers wait here, in the negotiation, and said nothing.
  double warn_after_s = 0;
  // The bound on a data call that moves bytes between hosts (LinkWait): it may wait
  // transfer_base_s plus its bytes at transfer_min_mbits megabits per second, then the job
  // ends (MPI cannot cancel a transfer). MXHOROVOD_TRANSFER_TIMEOUT_SECONDS (0: no bound)
  // and MXHOROVOD_TRANSFER_MIN_MBITS.
  double transfer_base_s = 30;
  double transfer_min_mbits = 100;
  // (The pause between tests of a wait between hosts is link_pace.h's LinkPauseUs.)
};

// A data call over a communicator that spans hosts. MPI moves bytes over TCP only while
// some call of this process drives its progress: the wait tests back to back for
// data_busy_us, then, where `pause` is set, sleeps between tests (the time the link takes
// to move 20 KB, link_pace.h, well within the socket buffers; or MXHOROVOD_LINK_SLEEP_US),
// else yields its core between tests. It never sleeps on the doorbell or for the growing pauses of WaitRequest (a 64
// MiB allreduce on 2 hosts x 2 ranks at 1 Gbit/s took 1391 ms with them against 649 with
// MPI's blocking call). A wait that yielded instead of sleeping moved an allreduce's bytes
// as fast but took 5.6 times the CPU (0.56 s per 64 MiB at 1 Gbit/s, 2 hosts x 1 rank,
// against 0.10), which the model's threads need when the exchange overlaps backward. The
// pause is for the calls measured as fast with it (allreduce, broadcast, allgather); an
// alltoall moved its bytes 3 times slower with it (MPICH's schedule advances in small
// steps, one per test). And the wait is bounded (WaitPolicy::transfer_*): past the bound
// the job ends with an error naming `peers` and the collective.
struct LinkWait {
  int64_t bytes = 0;  // the most this host sends over its link during the call
  std::string peers;  // the host(s) the call exchanges bytes with, "h2" or "h2, h3"
  bool pause = true;  // sleep LinkPauseUs() between tests (else yield)
};

// What a wait is for: kSmall is a message of at most a few KiB that MPI sends eagerly
// (negotiation, handshakes), which may use bell_sleep_us; kData anything else.
enum class WaitFor { kData, kSmall };

// Sets the policy for this process (before the background thread starts).
void SetWaitPolicy(const WaitPolicy& p);
const WaitPolicy& GetWaitPolicy();
// Opens this host's doorbell: collective over `comm` (every rank of the job) and `local`
// (the ranks of this host). Without /dev/shm (or if any rank of the host fails) the waits
// sleep on timers alone. `enabled` false (MXHOROVOD_DOORBELL=0) on any rank of a host keeps
// it off on that host. Returns whether every rank of the job can ring every other (one
// host, all opened): DoorbellEverywhere().
bool OpenDoorbell(MPI_Comm comm, MPI_Comm local, bool enabled);
bool DoorbellEverywhere();
void CloseDoorbell();
// Tells this thread's next kSmall wait (a negotiation's first) that a peer is known to be
// behind (the background loop's last negotiation answered none of this rank's work): where
// every rank can ring every other, it neither spins nor wakes every bell_sleep_us until some
// rank rings (the late peer rings when it starts its part), so a rank waiting long for a
// peer takes almost no CPU from its model's threads. After the first ring the wait is the
// usual one.
void SetPeerLate(bool late);
// Waits for *req; `what` names the operation in the error if MPI reports one. With `link`,
// a data call between hosts: see LinkWait.
Status WaitRequest(MPI_Request* req, const char* what, WaitFor kind = WaitFor::kData,
                   const LinkWait* link = nullptr);
// The bound of a transfer of `bytes` between hosts under the current policy, in seconds
// (0: no bound).
double TransferBoundSeconds(int64_t bytes);
// Names the collective the background thread runs now ("allreduce 'grad.3' (and 12
// more)"), for the transfer-bound error; "" when none.
void SetCurrentCollective(const std::string& what);
// MPI's error text for a return code.
std::string MPIErrorString(int code);
// OK for MPI_SUCCESS, else "MPI error in <what>: <MPI's text>" (the data plane's wording).
Status CheckMPI(int rc, const char* what);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_MPI_WAIT_H_
