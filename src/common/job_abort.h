// Ending the whole job when one rank cannot go on, and naming that rank.
//
// MPICH's launcher (hydra) ends the job when any rank dies, but names only its pid. So when
// a rank is about to die we say which rank it was, on stderr, in the log style
// ("[1]<error> ... mxhorovod: rank 1 (pid 4242 on host) got SIGSEGV ..."):
// - an unhandled Python exception: mxhorovod's excepthook (Python side) logs it and calls
//   AbortJob, as `python -m mpi4py` does;
// - a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, and SIGTERM when nobody handles
//   it): InstallSignalReports' handler writes the line, then the previous handler (MXNet's
//   stack trace, faulthandler) or the default action runs, so the process still dies of it;
//   a process still running 10 s later (MXNet's handler calls exit(), whose exit handlers
//   can wait forever) is ended by _exit(128 + signal), with a line saying so.
// SIGKILL cannot be caught: mxhorovod/rank_guard.py (a parent process) names such a rank.
#ifndef MXHOROVOD_COMMON_JOB_ABORT_H_
#define MXHOROVOD_COMMON_JOB_ABORT_H_

#include <string>

namespace mxhorovod {

// Closes the timeline file, waits (up to 2 s) until the launcher has read this process's
// stdout and stderr pipes (it is killed by the abort, and what it has not read is lost), then
// MPI_Abort(MPI_COMM_WORLD, code): every rank of the job ends and the launcher exits non-zero. Returns only if MPI is not running.
void AbortJob(int code);
// Whether MPI runs in this process (started by mxhorovod or by another library, mpi4py,
// and not finalized); if so, this process's rank in MPI_COMM_WORLD and its size.
bool MPIWorld(int* rank, int* size);
// Installs the fatal-signal reports for this rank (once per process; later calls only
// update the rank). Writes nothing when HOROVOD_LOG_LEVEL is above error.
void InstallSignalReports(int rank);
// Unlinks the names of MPICH's shared-memory files that this process maps
// (/dev/shm/mpich_shm_*, read from /proc/self/maps; never another job's). The mappings stay
// valid; a process that opens the name later finds none. Call it only once every rank of
// this host has attached. Async-signal-safe.
void ReleaseMPIShmNames();

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_JOB_ABORT_H_
