#include "own_file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace mxhorovod {
namespace {

std::string OwnedBy(const char* what, uid_t uid) {
  return std::string(what) + " belongs to uid " + std::to_string(uid) +
         ", not to this user (uid " + std::to_string(geteuid()) + ")";
}

// Why the opened file `st` may not be written, or "" when it may.
std::string Refusal(const struct stat& st) {
  const uid_t me = geteuid();
  if (S_ISREG(st.st_mode)) {
    if (st.st_uid != me) return OwnedBy("it", st.st_uid);
    if (st.st_nlink > 1) return "it has " + std::to_string(st.st_nlink) + " hard links";
    return "";
  }
  if (S_ISFIFO(st.st_mode) || S_ISCHR(st.st_mode)) {
    if (st.st_uid != me && st.st_uid != 0) return OwnedBy("it", st.st_uid);
    return "";
  }
  return "it is not a file";
}

}  // namespace

FILE* OpenOwnFileForWriting(const std::string& path, std::string* why) {
  const uid_t me = geteuid();
  for (int attempt = 0; attempt < 3; ++attempt) {
    struct stat lst;
    const bool exists = lstat(path.c_str(), &lst) == 0;
    if (exists && S_ISLNK(lst.st_mode) && lst.st_uid != me && lst.st_uid != 0) {
      *why = OwnedBy("it is a symbolic link that", lst.st_uid);
      return nullptr;
    }
    // O_NONBLOCK: the open of a FIFO that nobody reads fails (ENXIO) instead of waiting.
    // A free name is made with O_EXCL (a link planted meanwhile is not followed); the
    // user's own link is followed, and its target made if missing, as fopen does.
    int flags = O_WRONLY | O_CLOEXEC | O_NONBLOCK;
    if (!exists) flags |= O_CREAT | O_EXCL;
    if (exists && S_ISLNK(lst.st_mode)) flags |= O_CREAT;
    const int fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0) {
      if (errno == EEXIST && !exists) continue;  // made meanwhile: look again
      *why = errno == ENXIO ? "it is a FIFO that nobody reads" : std::strerror(errno);
      return nullptr;
    }
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      *why = std::strerror(errno);
    } else if (*why = Refusal(st), !why->empty()) {
      // refused: *why says why
    } else if (S_ISREG(st.st_mode) && ::ftruncate(fd, 0) != 0) {
      *why = std::strerror(errno);
    } else if (::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
      *why = std::strerror(errno);
    } else if (FILE* f = ::fdopen(fd, "w")) {
      return f;
    } else {
      *why = std::strerror(errno);
    }
    ::close(fd);
    return nullptr;
  }
  *why = "another process keeps making and removing the name";
  return nullptr;
}

}  // namespace mxhorovod
