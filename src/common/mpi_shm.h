// MPICH's shared-memory file of a host's ranks (/dev/shm/mpich_shm_*): MPICH names it from
// the launcher's job name, which another local user can predict, and opens an existing
// name without checking who made it. A file another user made first would let them read
// and write every message between this job's ranks of the host.
#ifndef MXHOROVOD_COMMON_MPI_SHM_H_
#define MXHOROVOD_COMMON_MPI_SHM_H_

#include <mpi.h>

#include "status.h"

namespace mxhorovod {

// Collective over `comm` (every rank of the job, after MPI started, before any rank
// unlinks the names: ReleaseMPIShmNames). Each rank checks the MPICH files it maps
// (/proc/self/maps) whose name still leads to the mapped file: owned by this user, and no
// access for group or others. An error on every rank when any rank's check fails, naming
// that rank, the file, its owner and mode.
Status CheckMPIShmOwners(MPI_Comm comm, int rank);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_MPI_SHM_H_
