#include "mpi_shm.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "startup.h"

namespace mxhorovod {
namespace {

// The first mapped MPICH file of this process that is not this user's private file, as
// "<path> belongs to uid N (mode 0666)", or "" when there is none.
std::string ForeignShm() {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    const size_t at = line.find("/dev/shm/mpich_shm_");
    if (at == std::string::npos) continue;
    const std::string path = line.substr(at);
    if (path.find(' ') != std::string::npos) continue;  // "(deleted)": no name to check
    std::istringstream fields(line);
    std::string range, perms, offset, dev;
    unsigned long long inode = 0;
    if (!(fields >> range >> perms >> offset >> dev >> inode)) continue;
    unsigned major_id = 0, minor_id = 0;
    if (std::sscanf(dev.c_str(), "%x:%x", &major_id, &minor_id) != 2) continue;
    struct stat st;
    // A name that leads elsewhere now (renamed, replaced) says nothing of the mapped file.
    if (lstat(path.c_str(), &st) != 0 || st.st_ino != inode || major(st.st_dev) != major_id ||
        minor(st.st_dev) != minor_id) {
      continue;
    }
    if (st.st_uid != geteuid() || (st.st_mode & 077) != 0) {
      char mode[8];
      std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return path + " belongs to uid " + std::to_string(st.st_uid) + " (mode " + mode +
             "), not privately to this user (uid " + std::to_string(geteuid()) + ")";
    }
  }
  return "";
}

}  // namespace

Status CheckMPIShmOwners(MPI_Comm comm, int rank) {
  const std::string mine = ForeignShm();
  int first = mine.empty() ? INT_MAX : rank;
  int rc = MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm);
  if (rc != MPI_SUCCESS) return MPICheck(rc, "MPI_Allreduce (MPICH's shared memory check)");
  if (first == INT_MAX) return Status::OK();
  const std::string what =
      mine.empty() ? "on the host of rank " + std::to_string(first) + ", MPICH's shared-memory "
                     "file is not this user's (rank " + std::to_string(first) + " names it)"
                   : "MPICH's shared-memory file " + mine;
  return Status::PreconditionError(
      what + ": another local user made its name before this job started, and can read and "
      "write the messages between the ranks of that host (MPICH opens an existing name "
      "without a check). The job ends; start it again (the name changes with each launch) "
      "and tell the administrator of the host");
}

}  // namespace mxhorovod
