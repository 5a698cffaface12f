// Opening a file the user named for writing (the timeline, the autotune log) without
// writing into another user's file: in a shared folder such as /tmp, another local user can
// make the name first, as a file of theirs or as a symbolic link to one of ours.
#ifndef MXHOROVOD_COMMON_OWN_FILE_H_
#define MXHOROVOD_COMMON_OWN_FILE_H_

#include <cstdio>
#include <string>

namespace mxhorovod {

// Opens `path` for writing, emptied, made with mode 0644 (less the umask) if missing. Refuses
// a symbolic link (O_NOFOLLOW), anything but a regular file, and a file of another user (the
// check is on the opened file, so the name cannot be swapped in between; nothing is emptied
// before it). Returns nullptr with the reason in *why ("... belongs to uid 1001, not to this
// user (uid 0)", or strerror's text).
FILE* OpenOwnFileForWriting(const std::string& path, std::string* why);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_OWN_FILE_H_
