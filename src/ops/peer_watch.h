// Telling that a rank of this host has ended while this rank waits for it.
//
// MPICH's mpirun (Hydra) ends the job when a rank that started MPI exits without finalizing
// it: it sees the rank's launcher connection (PMI_FD) close. A process the rank forked
// (os.fork, multiprocessing with 'fork', a DataLoader worker, a crash reporter) inherits
// that connection; when the rank dies while such a child lives, the connection stays open
// and Hydra leaves the other ranks waiting for the dead one forever (tests/core/workers/
// failures_exit_with_forked_child.py; CI runs also showed Hydra missing a rank's os._exit or
// watchdog exit now and then without any child). The ranks of one host see each other's
// processes in /proc, so a rank waiting in a collective can tell that a peer it waits for is
// gone and end the job itself (mpi_wait.cc). Ranks of other hosts are not watched.
#ifndef MXHOROVOD_OPS_PEER_WATCH_H_
#define MXHOROVOD_OPS_PEER_WATCH_H_

#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace mxhorovod {

// Collective over `local` (the ranks of this host): learns each one's job rank `job_rank`,
// pid, start time (field 22 of /proc/PID/stat, clock ticks since boot) and pid namespace,
// and watches the others of this pid namespace whose /proc entry this process sees with the
// same start time. Replaces an earlier watch.
void WatchLocalPeers(MPI_Comm local, int job_rank);
// Stops watching (the background loop's end: peers may then exit).
void StopWatchingPeers();
// "" while every watched peer runs; else the ended ones, "rank 1 (pid 4242 on host)" or
// "ranks 1, 2 (pids 4242, 4243 on host)": no such process (ESRCH), a zombie, or another
// process under that pid (a different start time). A /proc file that cannot be read for
// another reason (no descriptor left) says nothing: that peer counts as running. Reads one
// /proc file per watched peer. `groups` (if
// given) receives the pids of the ended ones that led their process group (Hydra starts
// each rank as the leader of a session of its own), unless another process now has the
// pid: the group's id outlives its leader while a member lives, and no new process can
// take that pid meanwhile, so `kill(-pid)` reaches only what that rank forked (never this
// process's own group).
std::string EndedLocalPeers(std::vector<int64_t>* groups = nullptr);

}  // namespace mxhorovod

#endif  // MXHOROVOD_OPS_PEER_WATCH_H_
