// Checks, before MPI starts, that this process can reach the launcher that started the job.
#pragma once

#include <string>

#include "status.h"

namespace mxhorovod {

// MPICH's mpirun (Hydra) gives each process it starts a connection in PMI_FD. A process the
// rank started itself (multiprocessing with 'spawn' or 'forkserver', a subprocess) inherits
// the variable but not the descriptor: MPI_Init there wrote the launcher's protocol into
// whatever file had that number, or aborted the process with "PMI_Init returned -1" (the
// child's hvd.init() raised nothing, its parent waited for it). Returns an error naming the
// variable when PMI_FD is set and is not an open socket here; OK otherwise.
Status CheckLauncherConnection();

// Hydra's connection (PMI_FD) is inherited by a process forked from the rank before
// hvd.init() (os.fork, multiprocessing with 'fork', a DataLoader worker); MPI_Init in both
// that child and the rank ended the job in MPI_Init_thread (UCX "failed to unpack
// address", then MPI_Abort). The first of the processes forked from one another (after
// mxhorovod was imported) to start MPI claims the connection; returns an error naming the
// owner when another one has, OK otherwise (and when PMI_FD is not set).
Status ClaimLauncherConnection();

// This process's rank and the job's size as the launcher gave them in the environment,
// before MPI starts (MPICH/Hydra and Intel MPI: PMI_RANK, PMI_SIZE; Open MPI:
// OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE; PMIx: PMIX_RANK), -1 for what is not given
// or not a number. Only for messages: MPI's own rank replaces it once MPI has started.
void LauncherRankAndSize(int* rank, int* size);

// The ranks of this host that have exited, as Hydra (MPICH's mpirun) shows them: it starts
// every rank of a host at once as a child of one hydra_pmi_proxy (through wrappers such
// as mxhorovod/rank_guard.py or `sh -c`, which end with the rank) and gives each
// MPI_LOCALNRANKS, MPI_LOCALRANKID and PMI_RANK. A rank that ends before MPI has started
// on every rank (an exception before hvd.init(), os._exit, a crash) leaves the others
// waiting in init() forever: Hydra ends a job only when a rank that started MPI exits.
// Returns "" while every rank of the host runs, or when this cannot be told (another
// launcher, no /proc/PID/task/TID/children); else a text naming the exited ranks: the
// job's ranks when every rank runs on this host, the host's local ranks otherwise.
std::string ExitedLocalRanks();

}  // namespace mxhorovod
