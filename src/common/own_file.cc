#include "own_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace mxhorovod {

FILE* OpenOwnFileForWriting(const std::string& path, std::string* why) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    *why = errno == ELOOP ? "it is a symbolic link" : std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    *why = std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *why = "it is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    *why = "it belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
           std::to_string(::geteuid()) + ")";
  } else if (::ftruncate(fd, 0) != 0) {
    *why = std::strerror(errno);
  } else if (FILE* f = ::fdopen(fd, "w")) {
    return f;
  } else {
    *why = std::strerror(errno);
  }
  ::close(fd);
  return nullptr;
}

}  // namespace mxhorovod
