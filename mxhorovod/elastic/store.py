"""Each host's own copy of the last commit, in a directory that only this host reads.

One rank per host (local rank 0) writes ``<dir>/<job id>/commit-<generation>-<counter>``,
to a temporary name then renamed, so a file of that name is always whole.
``<dir>`` is MXHOROVOD_ELASTIC_COMMIT_DIR, default ``/dev/shm/mxhorovod-elastic`` (memory),
or ``$TMPDIR/mxhorovod-elastic`` where /dev/shm is not writable.
Commits are ordered by (generation, counter); the generation is the driver's job number,
so a commit made after a reset outranks an older one that a host left out may still hold.
The file: 8 bytes of header length, a pickled header (metadata, the arrays' dtypes and
shapes), then each array's raw bytes, written from the numpy array's own memory.
"""
import io
import os
import pickle
import re
import shutil
import struct
import tempfile

import numpy as np

from mxhorovodrun.elastic_protocol import ENV_COMMIT_DIR, ENV_JOB_ID

__all__ = ["CommitStore", "commit_base_dir"]

_NAME = re.compile(r"^commit-(\d+)-(\d+)$")


def commit_base_dir(environ=None):
    """The directory under which this host keeps commits (see the module)."""
    environ = os.environ if environ is None else environ
    chosen = environ.get(ENV_COMMIT_DIR, "").strip()
    if chosen:
        return chosen
    if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK):
        return "/dev/shm/mxhorovod-elastic"
    return os.path.join(tempfile.gettempdir(), "mxhorovod-elastic")


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


def dump(obj, path):
    """Writes ``obj`` (any picklable structure) to ``path`` as the module says."""
    collector = _Arrays()
    header = io.BytesIO()
    collector.pickler(header).dump(obj)
    head = header.getvalue()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for a in collector.arrays:
            f.write(memoryview(a).cast("B"))


def load(path):
    """Reads what :func:`dump` wrote."""
    with open(path, "rb") as f:
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


class CommitStore:
    """This host's commits of one job (``job_id``: the driver's, MXHOROVOD_ELASTIC_JOB_ID)."""

    def __init__(self, job_id=None, base=None):
        job_id = job_id or os.environ.get(ENV_JOB_ID) or "default"
        if not re.match(r"^[\w.-]+$", job_id):
            raise ValueError("%s=%r: letters, digits, '.', '-' and '_' only" % (ENV_JOB_ID, job_id))
        self.directory = os.path.join(base or commit_base_dir(), job_id)

    def latest(self):
        """(generation, counter, path) of the newest whole commit here, or None."""
        best = None
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:
            return None
        for name in names:
            m = _NAME.match(name)
            if m:
                key = (int(m.group(1)), int(m.group(2)))
                if best is None or key > best[:2]:
                    best = key + (os.path.join(self.directory, name),)
        return best

    def write(self, generation, counter, obj):
        """Writes ``obj`` as commit (generation, counter), atomically, and removes the older
        ones. Returns its path.

        Raises:
            OSError: the directory cannot be made or the file written (a full /dev/shm: set
                MXHOROVOD_ELASTIC_COMMIT_DIR to a bigger local disk).
        """
        os.makedirs(self.directory, mode=0o700, exist_ok=True)
        final = os.path.join(self.directory, "commit-%d-%d" % (generation, counter))
        tmp = os.path.join(self.directory, ".tmp-%d" % os.getpid())
        try:
            dump(obj, tmp)
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
        return load(path)

    def remove(self):
        """Removes this job's commits on this host (the training function returned)."""
        shutil.rmtree(self.directory, ignore_errors=True)
