"""Each host's own copy of the last commit, in a folder that only this user can reach.

One rank per host (local rank 0) writes ``<user folder>/<job id>/commit-<generation>-<counter>``,
to a temporary name then renamed, so a file of that name is always whole.
Commits are ordered by (generation, counter); the generation is the driver's job number,
so a commit made after a reset outranks an older one that a host left out may still hold.
The file: 8 bytes of header length, a pickled header (metadata, the arrays' dtypes and
shapes), then each array's raw bytes, written from the numpy array's own memory.

The user folder (:func:`commit_base_dir`):

- ``MXHOROVOD_ELASTIC_COMMIT_DIR`` when set. Made (mode 0700) if missing. An existing one
  must be a folder of this user, not a symbolic link, that no other user can write to;
  anything else raises :class:`CommitDirError` naming it.
- Else ``/dev/shm/mxhorovod-elastic-<uid>`` (memory; ``$TMPDIR`` where /dev/shm is not
  writable). A name there that another user took first (or a link) is passed over, with a
  warning, for ``...-<uid>.1``, ``.2``, up to ``.15``; then ``~/.cache/mxhorovod/elastic-
  <host>``. Another user can neither be read from nor stop the job.

Every folder the package makes is mode 0700 and checked (this user's, 0700, not a link)
before use. A commit file that is not this user's regular file is never read (pickle runs
code: a planted commit would run another user's code in the ranks).
"""
import io
import os
import pickle
import re
import shutil
import socket
import stat
import struct
import tempfile

import numpy as np

from mxhorovod.common.log import get_logger
from mxhorovodrun.elastic_protocol import ENV_COMMIT_DIR, ENV_JOB_ID

__all__ = ["CommitStore", "CommitDirError", "commit_base_dir"]

_NAME = re.compile(r"^commit-(\d+)-(\d+)$")
# Names tried in the shared place after the first: <name>.1 ... <name>.15.
_SPARE_NAMES = 15


class CommitDirError(PermissionError):
    """A commit folder fails the ownership check: another user's, a symbolic link, not a
    folder, or writable by other users. The message names the folder and what is wrong."""


def _uid():
    return os.geteuid()


def _problem(path, private=True):
    """Why ``path`` may not hold commits (None: it may). ``private``: it must be mode
    0700-or-narrower (a folder the package made); else it need only be closed to other
    users' writes (a folder the user named)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != _uid():
        return "it belongs to uid %d, not to this user (uid %d)" % (st.st_uid, _uid())
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return "its mode is %04o, not 0700" % mode
    if not private and mode & 0o022:
        return "other users can write to it (mode %04o)" % mode
    return None


def _make_private(path):
    """Makes ``path`` (mode 0700) unless it exists; None when it is fit to use, else why not."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # whatever the umask (a sticky shared place: still ours)
    except FileExistsError:
        pass
    return _problem(path)


def _makedirs_private(path):
    """Makes ``path`` and each missing folder above it, each mode 0700 (os.makedirs gives
    the folders above the umask's mode)."""
    parent = os.path.dirname(path)
    if parent != path and not os.path.lexists(parent):
        _makedirs_private(parent)
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)
    except FileExistsError:
        pass


def _shared_root():
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm"
    return tempfile.gettempdir()


def _home_fallback():
    top = os.path.join(os.path.expanduser("~"), ".cache", "mxhorovod")
    _makedirs_private(top)
    return os.path.join(top, "elastic-%s" % socket.gethostname())


def commit_base_dir(environ=None, shared_root=None):
    """The folder of this user under which this host keeps commits (see the module); made
    and checked here.

    Args:
        environ: the environment to read ``MXHOROVOD_ELASTIC_COMMIT_DIR`` from (default
            ``os.environ``).
        shared_root: the shared place for the default name (default ``/dev/shm``, else
            ``$TMPDIR``).

    Raises:
        CommitDirError: ``MXHOROVOD_ELASTIC_COMMIT_DIR`` names a folder that fails the check;
            or every default name, the fallback under ``~/.cache`` included, does.
    """
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENV_COMMIT_DIR, "").strip()
    if chosen:
        path = os.path.abspath(chosen)
        if not os.path.lexists(path):
            try:
                _makedirs_private(path)
            except OSError as e:
                raise CommitDirError("%s=%s: cannot make it (%s)" % (ENV_COMMIT_DIR, chosen, e)) \
                    from None
        why = _problem(path, private=False)
        if why:
            raise CommitDirError("%s=%s: not used for elastic commits: %s. Name a folder of "
                                 "your own that other users cannot write to"
                                 % (ENV_COMMIT_DIR, chosen, why))
        return path
    root = shared_root or _shared_root()
    first = os.path.join(root, "mxhorovod-elastic-%d" % _uid())
    passed = []
    for path in [first] + ["%s.%d" % (first, k) for k in range(1, _SPARE_NAMES + 1)]:
        why = _make_private(path)
        if why is None:
            break
        passed.append("%s (%s)" % (path, why))
    else:
        path = _home_fallback()
        why = _make_private(path)
        if why:
            raise CommitDirError("no folder for elastic commits: %s; and %s: %s. Set %s to a "
                                 "folder of your own" % ("; ".join(passed), path, why,
                                                         ENV_COMMIT_DIR))
    if passed:
        get_logger().warning("hvd.elastic: passed over %s; commits go to %s",
                             "; ".join(passed), path)
    return path


class _Arrays:
    """Pickles a structure, taking its numpy arrays out (written raw after the pickle)."""

    def __init__(self):
        self.arrays = []

    def pickler(self, buf):
        arrays = self.arrays

        class P(pickle.Pickler):
            def persistent_id(self, obj):
                if type(obj) is np.ndarray and obj.dtype != object and obj.nbytes >= 1024:
                    arrays.append(np.ascontiguousarray(obj))
                    return ("a", len(arrays) - 1, obj.dtype.str, obj.shape)
                return None
        return P(buf, protocol=pickle.HIGHEST_PROTOCOL)


def dump(obj, f):
    """Writes ``obj`` (any picklable structure) to the binary file ``f`` as the module says."""
    collector = _Arrays()
    header = io.BytesIO()
    collector.pickler(header).dump(obj)
    head = header.getvalue()
    f.write(struct.pack("<Q", len(head)))
    f.write(head)
    for a in collector.arrays:
        f.write(memoryview(a).cast("B"))


def load(f):
    """Reads what :func:`dump` wrote, from the binary file ``f``."""
    (n,) = struct.unpack("<Q", f.read(8))
    head = f.read(n)
    # The arrays follow in the order of their ids (the pickle's order).
    specs = []

    class Scan(pickle.Unpickler):
        def persistent_load(self, pid):
            specs.append(pid)
            return pid
    Scan(io.BytesIO(head)).load()
    arrays = {}
    for _, k, dtype, shape in sorted(specs, key=lambda s: s[1]):
        a = np.empty(shape, dtype=np.dtype(dtype))
        f.readinto(memoryview(a).cast("B"))
        arrays[k] = a

    class Load(pickle.Unpickler):
        def persistent_load(self, pid):
            return arrays[pid[1]]
    return Load(io.BytesIO(head)).load()


def _own_file(st):
    return stat.S_ISREG(st.st_mode) and st.st_uid == _uid()


class CommitStore:
    """This host's commits of one job (``job_id``: the driver's, MXHOROVOD_ELASTIC_JOB_ID)
    in this user's folder ``base`` (default :func:`commit_base_dir`).

    Raises:
        ValueError: a job id with characters other than letters, digits, '.', '-', '_'.
        CommitDirError: the folder, or the job's folder in it, fails the check.
    """

    def __init__(self, job_id=None, base=None):
        job_id = job_id or os.environ.get(ENV_JOB_ID) or "default"
        if not re.match(r"^[\w.-]+$", job_id) or job_id in (".", ".."):
            raise ValueError("%s=%r: letters, digits, '.', '-' and '_' only" % (ENV_JOB_ID, job_id))
        self.directory = os.path.join(base or commit_base_dir(), job_id)
        why = _make_private(self.directory)
        if why:
            raise CommitDirError("%s: not used for elastic commits: %s" % (self.directory, why))

    def latest(self):
        """(generation, counter, path) of the newest whole commit here, or None. Files that
        are not this user's regular files are passed over."""
        best = None
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return None
        for name in names:
            m = _NAME.match(name)
            if not m:
                continue
            path = os.path.join(self.directory, name)
            try:
                if not _own_file(os.lstat(path)):
                    continue
            except OSError:
                continue
            key = (int(m.group(1)), int(m.group(2)))
            if best is None or key > best[:2]:
                best = key + (path,)
        return best

    def write(self, generation, counter, obj):
        """Writes ``obj`` as commit (generation, counter), atomically, and removes the older
        ones. Returns its path.

        Raises:
            OSError: the directory cannot be made or the file written (a full /dev/shm: set
                MXHOROVOD_ELASTIC_COMMIT_DIR to a bigger local disk).
        """
        why = _make_private(self.directory)  # (removed meanwhile: made again)
        if why:
            raise CommitDirError("%s: not used for elastic commits: %s" % (self.directory, why))
        final = os.path.join(self.directory, "commit-%d-%d" % (generation, counter))
        tmp = os.path.join(self.directory, ".tmp-%d" % os.getpid())
        try:
            try:
                os.unlink(tmp)  # left by a dead process of the same pid
            except FileNotFoundError:
                pass
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
            with os.fdopen(fd, "wb") as f:
                dump(obj, f)
            os.replace(tmp, final)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
        for name in os.listdir(self.directory):
            m = _NAME.match(name)
            if m and (int(m.group(1)), int(m.group(2))) < (generation, counter):
                try:
                    os.unlink(os.path.join(self.directory, name))
                except OSError:
                    pass
        return final

    def read(self, path):
        """The commit at ``path``.

        Raises:
            CommitDirError: ``path`` is not this user's regular file (a link, another
                user's file): it is not read.
        """
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd, "rb") as f:
            if not _own_file(os.fstat(f.fileno())):
                raise CommitDirError("%s: not read: not a file of this user (uid %d)"
                                     % (path, _uid()))
            return load(f)

    def remove(self):
        """Removes this job's commits on this host (the training function returned)."""
        shutil.rmtree(self.directory, ignore_errors=True)
