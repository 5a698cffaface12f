// A HOROVOD_* / MXHOROVOD_* variable that one rank cannot read must fail init() on every rank.
#pragma once

#include <mpi.h>

#include <string>

#include "status.h"

namespace mxhorovod {

// Collective over `comm` (every rank of the job, right after MPI starts): `mine` is this
// rank's error from reading its settings ("" when they read fine). A rank that refused its
// settings before starting MPI left its peers waiting in init() forever; now every rank
// starts MPI, and when any rank's settings are bad, init() fails on every rank: the bad
// ranks with their own error, the others naming each bad rank and its error.
Status ShareSettingErrors(MPI_Comm comm, const std::string& mine);

}  // namespace mxhorovod
