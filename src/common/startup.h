// The background thread's start-up: MPI (started here unless the script did), the job's
// communicator, the host topology, and the settings every rank must share; and init()'s
// wait for it, with its warnings.
#ifndef MXHOROVOD_COMMON_STARTUP_H_
#define MXHOROVOD_COMMON_STARTUP_H_

#include <mpi.h>

#include <cstdint>
#include <initializer_list>
#include <mutex>
#include <string>
#include <vector>

#include "config.h"
#include "operations.h"
#include "status.h"

namespace mxhorovod {

// The communicators of the host grouping, kept for the hierarchical allreduce; freed when
// the background loop ends.
struct HostComms {
  MPI_Comm local = MPI_COMM_NULL;  // the ranks of this host
  MPI_Comm cross = MPI_COMM_NULL;  // the ranks with this local rank, one per host
};

// Frees communicators that are not null (unless MPI is finalized).
void FreeComms(std::initializer_list<MPI_Comm*> comms);

// OK for MPI_SUCCESS, else "<what> failed: <MPI's text>".
Status MPICheck(int rc, const char* what);

// Starts MPI unless it runs, checks that every rank calls init() (warning while one does
// not), makes the job's communicator *comm (a duplicate of MPI_COMM_WORLD, of the parent
// given by comm_f2c, or of its `ranks`), shares this rank's setting error cfg_error ("" if
// none; a non-empty one fails init() on every rank), and fills the host topology.
// *hierarchical: in, HOROVOD_HIERARCHICAL_ALLREDUCE (-1 unset); out, whether the global
// set's allreduce is hierarchical: the setting, or when unset, whether the job spans more
// than one host with more than one rank on some host (then only the local roots send
// between hosts), or more than 2 hosts (its ring between hosts sends the least); agreed
// on every rank.
Status StartMPI(int64_t comm_f2c, const std::vector<int>& ranks, int* hierarchical,
                const Config& cfg, const std::string& cfg_error, MPI_Comm* comm, Topology* topo,
                HostComms* hc);

// Fails on every rank, naming each setting and the ranks' values, when the settings that
// decide a cycle's MPI calls differ between ranks; agrees on MXHOROVOD_BLOCKING_DATA.
Status AgreeOnSettings(MPI_Comm comm, const Topology& topo, bool dynamic, Config* cfg);

// init()'s wait (holding `lk` on S().mu) for the background thread's start-up, with its
// warnings; an error when a rank it waits for has exited.
Status WaitForStart(std::unique_lock<std::mutex>& lk, const Config& cfg);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_STARTUP_H_
