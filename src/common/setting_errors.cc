#include "setting_errors.h"

#include <algorithm>
#include <vector>

namespace mxhorovod {

Status ShareSettingErrors(MPI_Comm comm, const std::string& mine) {
  constexpr int kChars = 400;  // per rank; a longer error is cut (its start names the variable)
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<char> own(kChars, 0), all((size_t)kChars * size, 0);
  std::copy_n(mine.begin(), std::min<size_t>(mine.size(), kChars - 1), own.begin());
  int rc = MPI_Allgather(own.data(), kChars, MPI_CHAR, all.data(), kChars, MPI_CHAR, comm);
  if (rc != MPI_SUCCESS) return Status::UnknownError("MPI error in MPI_Allgather (settings)");
  if (!mine.empty()) return Status::InvalidArgument(mine);
  std::string text;
  for (int r = 0; r < size; ++r) {
    const char* e = &all[(size_t)r * kChars];
    if (!*e) continue;
    text += std::string(text.empty() ? "" : "; ") + "rank " + std::to_string(r) + ": " + e;
  }
  if (text.empty()) return Status::OK();
  return Status::InvalidArgument("init(): other ranks could not read their settings (" + text +
                                 "); set each the same way for every rank");
}

}  // namespace mxhorovod
