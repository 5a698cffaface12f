"""The folder of this user where a host keeps its elastic commits (:func:`commit_base_dir`),
the checks that keep other local users out of it, and the sweep of killed runs' commits.
The commits themselves: store.py.

The user folder (:func:`commit_base_dir`), the first of these that passes the check:

1. ``MXHOROVOD_ELASTIC_COMMIT_DIR`` when set, and then only it. Made (mode 0700) if
   missing. It, or the folder a link of this user's names, must be a folder of this user
   that no other user can write to. Every folder above it (and every link on the way) must
   be this user's or root's, and a folder above that other users can write to must have the
   sticky bit (as /tmp): otherwise another user could swap it. Anything else raises
   :class:`CommitDirError` naming what is wrong.
2. ``/dev/shm/mxhorovod-elastic-<uid>`` (memory; ``$TMPDIR`` where /dev/shm is not
   writable), then ``...-<uid>.1``, ``.2``, up to ``.15``: a name another user took first
   (or a link) is passed over.
3. ``/dev/shm/mxhorovod-elastic-<uid>-<job id>``, when the job id is not ``default``: the
   elastic driver's id is random and only in the ranks' environment, so no other user can
   take that name first. Removed with the job's commits.
4. ``~/.cache/mxhorovod/elastic-<host>``.

What was passed over is named in one warning; when nothing passes, :class:`CommitDirError`
names each place and why, and says to set ``MXHOROVOD_ELASTIC_COMMIT_DIR``. Another user can
neither be read from nor stop the job.

Every folder the package makes is mode 0700 and checked (this user's, 0700, not a link)
before use; the user folder is checked again at each commit. A commit file that is not this
user's regular file is never read (pickle runs code: a planted commit would run another
user's code in the ranks).

A job that ends normally removes its folder. A run killed as a whole leaves each host's
last commit: a :class:`CommitStore` removes the folders of this user's other jobs (names
``mxh-`` and 12 hex digits, holding only commit files of this user) in which nothing changed
for ``MXHOROVOD_ELASTIC_COMMIT_TTL`` seconds (default 86400).
"""
import math
import os
import re
import shutil
import socket
import stat
import tempfile
import time

from mxhorovod.common.log import get_logger
from mxhorovodrun.elastic_protocol import ENV_COMMIT_DIR, ENV_JOB_ID

__all__ = ["CommitDirError", "commit_base_dir", "choose_base", "job_id_of", "make_private",
           "named_ready", "private_ready", "own_file", "sweep_stale", "uid", "commit_ttl",
           "ENV_COMMIT_TTL"]

# Names tried in the shared place after the first: <name>.1 ... <name>.15.
_SPARE_NAMES = 15
# The elastic driver's job ids (mxhorovodrun/elastic_driver.py), and the files of a job
# folder: only folders of that name holding only such files are ever swept.
DRIVER_JOB = re.compile(r"^mxh-[0-9a-f]{12}$")
_JOB_FILE = re.compile(r"^(commit-\d+-\d+|\.tmp-\d+)$")
ENV_COMMIT_TTL = "MXHOROVOD_ELASTIC_COMMIT_TTL"
_DEFAULT_TTL = 86400.0
_ttl = []  # read once


class CommitDirError(PermissionError):
    """A commit folder fails the ownership check: another user's, a symbolic link, not a
    folder, or writable by other users (or a folder above it is). The message names the
    folder and what is wrong."""


def uid():
    return os.geteuid()


def commit_ttl():
    """Seconds after which another job's untouched commit folder is swept
    (MXHOROVOD_ELASTIC_COMMIT_TTL, read once; default 86400). A value that is not a positive
    number gives the default, with a warning."""
    if not _ttl:
        text = os.environ.get("MXHOROVOD_ELASTIC_COMMIT_TTL", "").strip()
        value = _DEFAULT_TTL
        if text:
            try:
                value = float(text)
            except ValueError:
                value = -1.0
            if not (value > 0 and math.isfinite(value)):
                get_logger().warning("hvd.elastic: %s=%r is not a positive number of seconds; "
                                     "using %d", ENV_COMMIT_TTL, text, _DEFAULT_TTL)
                value = _DEFAULT_TTL
        _ttl.append(value)
    return _ttl[0]


def job_id_of(job_id):
    job_id = job_id or os.environ.get(ENV_JOB_ID) or "default"
    if not re.match(r"^[\w.-]+$", job_id) or job_id in (".", ".."):
        raise ValueError("%s=%r: letters, digits, '.', '-' and '_' only" % (ENV_JOB_ID, job_id))
    return job_id


def _problem(path, private=True):
    """Why ``path`` may not hold commits (None: it may). ``private``: it must be mode
    0700-or-narrower (a folder the package made); else it need only be closed to other
    users' writes (a folder the user named)."""
    if path is None:
        return "it does not exist"
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if st.st_uid != uid():
        return "it belongs to uid %d, not to this user (uid %d)" % (st.st_uid, uid())
    mode = stat.S_IMODE(st.st_mode)
    if private and mode & 0o077:
        return "its mode is %04o, not 0700" % mode
    if not private and mode & 0o022:
        return "other users can write to it (mode %04o)" % mode
    return None


def _walk(path, check_last):
    """Follows the absolute ``path`` one name at a time (links too), trusting no other user:
    returns (why, real). ``why`` (None: nothing wrong) names the first folder above (or link
    on the way) that another user could change: one that is not this user's or root's, or
    that others can write to without the sticky bit. ``check_last``: the last name is such
    a folder above too. ``real``: the path resolved, None when a name is missing (the rest
    is this user's to make)."""
    todo = path.split("/")[::-1]  # a stack: the next name last
    cur, hops = "/", 0
    st = os.lstat("/")
    while True:
        if st is not None:  # ``cur`` reached (not a link): the names left are below it
            if any(n not in ("", ".") for n in todo) or check_last:
                if not stat.S_ISDIR(st.st_mode):
                    return "%s, on the way, is not a folder" % cur, None
                if st.st_uid not in (0, uid()):
                    return ("the folder %s above it belongs to uid %d (not this user or root), "
                            "who could swap what is in it" % (cur, st.st_uid)), None
                mode = stat.S_IMODE(st.st_mode)
                if mode & 0o022 and not mode & stat.S_ISVTX:
                    return ("other users can write to the folder %s above it (mode %04o, no "
                            "sticky bit) and could swap what is in it" % (cur, mode)), None
            st = None
        if not todo:
            return None, cur
        name = todo.pop()
        if name in ("", "."):
            continue
        if name == "..":
            cur = os.path.dirname(cur)
            continue
        step = os.path.join(cur, name)
        try:
            st = os.lstat(step)
        except FileNotFoundError:
            return None, None
        except OSError as e:
            return "%s, on the way: %s" % (step, e.strerror), None
        if stat.S_ISLNK(st.st_mode):
            if st.st_uid not in (0, uid()):
                return ("%s, on the way, is a symbolic link of uid %d (not this user or root), "
                        "who could point it elsewhere" % (step, st.st_uid)), None
            hops += 1
            if hops > 40:
                return "%s, on the way: too many symbolic links" % step, None
            target = os.readlink(step)
            if target.startswith("/"):
                cur = "/"
            todo.extend(target.split("/")[::-1])
            st = None
            continue
        cur = step


def named_ready(path):
    """Makes the folder the user named (``path``, absolute; mode 0700, with the missing
    folders above it) unless it exists; None when it is fit to use, else why not."""
    why, _ = _walk(path, False)  # before making anything in it
    if why:
        return why
    if not os.path.lexists(path):
        _makedirs_private(path)
    why, real = _walk(path, False)
    return why or _problem(real, private=False)


def make_private(path):
    """Makes ``path`` (mode 0700) unless it exists; None when it is fit to use, else why not."""
    try:
        os.mkdir(path, 0o700)
        os.chmod(path, 0o700)  # whatever the umask (a sticky shared place: still ours)
    except FileExistsError:
        pass
    return _problem(path)


def private_ready(path):
    """:func:`make_private`, after checking the folders above ``path``."""
    why, _ = _walk(os.path.dirname(path), True)
    return why or make_private(path)


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
    """The folder under the home folder: (path, why not; None when fit). Raises OSError."""
    home = os.path.expanduser("~")
    if not os.path.isabs(home):
        return "~/.cache/mxhorovod", "no home folder is known"
    if not os.path.isdir(home):
        return home, "the home folder does not exist"
    top = os.path.join(home, ".cache", "mxhorovod")
    path = os.path.join(top, "elastic-%s" % socket.gethostname())
    why, _ = _walk(home, True)
    if why:
        return path, why
    _makedirs_private(top)
    return path, private_ready(path)


def choose_base(environ, shared_root, job_id):
    """(folder, whether the user named it, the shared place used or None, a per-job folder)."""
    chosen = environ.get(ENV_COMMIT_DIR, "").strip()
    if chosen:
        path = os.path.abspath(chosen)
        try:
            why = named_ready(path)
        except OSError as e:
            raise CommitDirError("%s=%s: cannot make it (%s)" % (ENV_COMMIT_DIR, chosen, e)) \
                from None
        if why:
            raise CommitDirError("%s=%s: not used for elastic commits: %s. Name a folder of "
                                 "your own that other users cannot write to"
                                 % (ENV_COMMIT_DIR, chosen, why))
        return path, True, None, False
    root = os.path.abspath(shared_root or _shared_root())
    passed = []
    try:
        why, _ = _walk(root, True)
    except OSError as e:
        why = str(e)
    names = []
    if why:
        passed.append("%s (%s)" % (root, why))
        root = None
    else:
        first = os.path.join(root, "mxhorovod-elastic-%d" % uid())
        names = [first] + ["%s.%d" % (first, k) for k in range(1, _SPARE_NAMES + 1)]
        if job_id != "default":
            names.append("%s-%s" % (first, job_id))
    found = None
    for path in names:
        try:
            why = make_private(path)
        except OSError as e:
            why = str(e)
        if why is None:
            found = path
            break
        passed.append("%s (%s)" % (path, why))
    if found is None:
        try:
            path, why = _home_fallback()
        except OSError as e:
            path, why = "~/.cache/mxhorovod", str(e)
        if why:
            passed.append("%s (%s)" % (path, why))
            raise CommitDirError("no folder for elastic commits: passed over %s. Set %s to a "
                                 "folder of your own that other users cannot write to"
                                 % ("; ".join(passed), ENV_COMMIT_DIR))
        found = path
    if passed:
        get_logger().warning("hvd.elastic: passed over %s; commits go to %s",
                             "; ".join(passed), found)
    per_job = names[-1] if names and job_id != "default" else None
    return found, False, root, found == per_job


def commit_base_dir(environ=None, shared_root=None, job_id=None):
    """The folder of this user under which this host keeps commits (see the module); made
    and checked here.

    Args:
        environ: the environment to read ``MXHOROVOD_ELASTIC_COMMIT_DIR`` (and the job id)
            from (default ``os.environ``).
        shared_root: the shared place for the default names (default ``/dev/shm``, else
            ``$TMPDIR``).
        job_id: the job's id (default ``MXHOROVOD_ELASTIC_JOB_ID`` of ``environ``, else
            ``default``), which names the per-job folder tried after the shared names.

    Raises:
        CommitDirError: ``MXHOROVOD_ELASTIC_COMMIT_DIR`` names a folder that fails the check;
            or every default place, the fallback under ``~/.cache`` included, does.
    """
    environ = os.environ if environ is None else environ
    job_id = job_id_of(job_id or environ.get(ENV_JOB_ID))
    return choose_base(environ, shared_root, job_id)[0]


def _stale(path, cutoff, depth):
    """Whether ``path`` is this user's folder, not a link, holding only this user's commit
    files (depth 1) or only job folders of them (depth 2), none changed since ``cutoff``."""
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != uid() or st.st_mtime > cutoff:
        return False
    with os.scandir(path) as entries:
        for entry in entries:
            if depth == 2:
                if not (DRIVER_JOB.match(entry.name) and _stale(entry.path, cutoff, 1)):
                    return False
                continue
            est = entry.stat(follow_symlinks=False)
            if not (_JOB_FILE.match(entry.name) and own_file(est) and est.st_mtime <= cutoff):
                return False
    return True


def _sweep(folder, pattern, keep, depth):
    """Removes the stale folders (see :func:`_stale`) in ``folder`` whose name ``pattern``
    matches, but ``keep``."""
    cutoff = time.time() - commit_ttl()
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        if name == keep or not pattern.match(name):
            continue
        path = os.path.join(folder, name)
        try:
            if not _stale(path, cutoff, depth):
                continue
            shutil.rmtree(path)
        except OSError:
            continue
        get_logger().info("hvd.elastic: removed %s: another job's commits, unchanged for %d s",
                          path, commit_ttl())


def own_file(st):
    return stat.S_ISREG(st.st_mode) and st.st_uid == uid()


def sweep_stale(base, shared, keep):
    """Removes the stale folders of this user's other jobs (see the module): in ``base``,
    those but ``keep``; in ``shared`` (the shared place, or None), this user's job-id
    folders but ``base``."""
    _sweep(base, DRIVER_JOB, keep, 1)
    if shared:
        _sweep(shared, re.compile(r"^mxhorovod-elastic-%d-mxh-[0-9a-f]{12}$" % uid()),
               os.path.basename(base), 2)
