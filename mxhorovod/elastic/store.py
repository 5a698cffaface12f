"""Each host's own copy of the last commit, in a folder that only this user can reach.

One rank per host (local rank 0) writes ``<user folder>/<job id>/commit-<generation>-<counter>``,
to a temporary name then renamed, so a file of that name is always whole.
Commits are ordered by (generation, counter); the generation is the driver's job number,
so a commit made after a reset outranks an older one that a host left out may still hold.
The file: 8 bytes of header length, a pickled header (metadata, the arrays' dtypes and
shapes), then each array's raw bytes, written from the numpy array's own memory.

The folder (``<user folder>``) and its checks: commit_dir.py.
"""
import io
import os
import pickle
import re
import shutil
import struct

import numpy as np

from mxhorovod.elastic.commit_dir import (CommitDirError, choose_base, commit_base_dir,
                                          job_id_of, make_private, named_ready, own_file,
                                          private_ready, sweep_stale, uid)

__all__ = ["CommitStore", "CommitDirError", "commit_base_dir"]

_NAME = re.compile(r"^commit-(\d+)-(\d+)$")


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


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CommitStore:
    """This host's commits of one job (``job_id``: the driver's, MXHOROVOD_ELASTIC_JOB_ID)
    in this user's folder ``base`` (default :func:`commit_base_dir`; a ``base`` given is
    checked as a folder the user named). Made, it sweeps the stale folders of this user's
    other jobs (commit_dir.py).

    Raises:
        ValueError: a job id with characters other than letters, digits, '.', '-', '_'.
        CommitDirError: the folder, or the job's folder in it, fails the check.
    """

    def __init__(self, job_id=None, base=None):
        job_id = job_id_of(job_id)
        shared, self._per_job = None, False
        if base is None:
            base, named, shared, self._per_job = choose_base(os.environ, None, job_id)
        else:
            base, named = os.path.abspath(base), True
        self.base = base
        self._named = named
        self._check_base()
        self.directory = os.path.join(base, job_id)
        # Other jobs' commits left by a run killed as a whole (commit_dir.py).
        sweep_stale(base, shared, job_id)
        why = make_private(self.directory)
        if why:
            raise CommitDirError("%s: not used for elastic commits: %s" % (self.directory, why))

    def _check_base(self):
        """Checks the user folder again (made again if removed): another user may not have
        swapped it, or a folder above it, since."""
        why = named_ready(self.base) if self._named else private_ready(self.base)
        if why:
            raise CommitDirError("%s: not used for elastic commits: %s" % (self.base, why))

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
                if not own_file(os.lstat(path)):
                    continue
            except OSError:
                continue
            key = (int(m.group(1)), int(m.group(2)))
            if best is None or key > best[:2]:
                best = key + (path,)
        return best

    def write(self, generation, counter, obj, sync=False):
        """Writes ``obj`` as commit (generation, counter), atomically, and removes the older
        ones. Returns its path. ``sync``: the file and the folder's entry are on disk
        (fsync) before it returns, as a durable commit must be.

        Raises:
            OSError: the directory cannot be made or the file written (a full /dev/shm: set
                MXHOROVOD_ELASTIC_COMMIT_DIR to a bigger local disk).
        """
        self._check_base()
        why = make_private(self.directory)  # (removed meanwhile: made again)
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
                os.fchmod(f.fileno(), 0o600)  # whatever the umask
                dump(obj, f)
                if sync:
                    f.flush()
                    os.fsync(f.fileno())
            os.replace(tmp, final)
            if sync:
                _fsync_dir(self.directory)
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
            if not own_file(os.fstat(f.fileno())):
                raise CommitDirError("%s: not read: not a file of this user (uid %d)"
                                     % (path, uid()))
            return load(f)

    def remove(self):
        """Removes this job's commits on this host (the training function returned)."""
        shutil.rmtree(self.directory, ignore_errors=True)
        if self._per_job:
            try:
                os.rmdir(self.base)
            except OSError:
                pass
