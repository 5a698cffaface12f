// Opening a file the user named for writing (the timeline, the autotune log) without
// writing into another user's file: in a shared folder such as /tmp, another local user can
// make the name first, as a file of theirs, as a FIFO (an open that never returns), or as
// a link to one of ours.
#ifndef MXHOROVOD_COMMON_OWN_FILE_H_
#define MXHOROVOD_COMMON_OWN_FILE_H_

#include <cstdio>
#include <string>

namespace mxhorovod {

// Opens `path` for writing; a regular file is emptied, and made (mode 0644 less the umask)
// when the name is free. Refused, with the reason in *why ("... belongs to uid 1001, not
// to this user (uid 0)", or strerror's text), and nullptr returned:
// - a symbolic link owned by a user other than this one or root (the user's own links and
//   the system's, /dev/stdout, are followed);
// - a regular file of another user, or with more than one hard link;
// - a FIFO or device of another user than this one or root (/dev/null is written to); a
//   FIFO nobody reads (never waited for);
// - anything else (a folder, a socket).
// The checks are on the opened file; a free name is made with O_EXCL (a link planted
// between the check and the open is not followed). Never blocks.
FILE* OpenOwnFileForWriting(const std::string& path, std::string* why);

}  // namespace mxhorovod

#endif  // MXHOROVOD_COMMON_OWN_FILE_H_
