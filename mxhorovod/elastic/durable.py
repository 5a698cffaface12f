"""Durable commits: a copy of each commit in a folder the user names, for a job stopped as
a whole.

Each host's commits (store.py) live in memory or on a local disk, and only for one run of
the elastic driver: they survive a lost host, not the end of the whole job. A Slurm
requeue after preemption, ``scancel`` and a new ``sbatch``, or every host lost at once
start a new run with nothing to resume from. With ``MXHOROVOD_ELASTIC_DURABLE_DIR`` set
(to a folder on a file system that every node sees, one folder per training run):

- every ``state.commit()`` also writes the commit there, from rank 0, synced to disk
  before ``commit()`` returns on any rank (a failed write raises OSError on every rank);
- ``hvd.elastic.run`` starts from the newest commit there when no host holds one of this
  run (a new run, or a fixed-size job under plain ``mpirun`` or ``srun``);
- the training function returning removes the folder's commits, so the next run of the
  same command starts afresh.

Commits are named ``commit-0-<sequence>`` in ``<folder>/durable``, the sequence one more
than the newest there at each write; the folder passes the checks of a folder the user
named (commit_dir.py: this user's, closed to other users' writes).
"""
import os

from mxhorovod.common.basics import rank
from mxhorovod.common.log import get_logger
from mxhorovod.elastic.store import CommitDirError, CommitStore

__all__ = ["ENV_DURABLE_DIR", "folder", "write", "latest", "read", "remove"]

ENV_DURABLE_DIR = "MXHOROVOD_ELASTIC_DURABLE_DIR"
_JOB = "durable"
_stores = {}


def folder():
    """The absolute folder named by MXHOROVOD_ELASTIC_DURABLE_DIR, or None when unset."""
    text = os.environ.get(ENV_DURABLE_DIR, "").strip()
    return os.path.abspath(os.path.expanduser(text)) if text else None


def _store():
    """The CommitStore of the folder (made once per folder).

    Raises:
        CommitDirError: the folder fails the check (the message names the variable).
    """
    path = folder()
    if path not in _stores:
        try:
            _stores[path] = CommitStore(job_id=_JOB, base=path)
        except CommitDirError as e:
            raise CommitDirError("%s=%s: %s" % (ENV_DURABLE_DIR, path, e)) from None
    return _stores[path]


def write(state, bcast_object):
    """Writes ``state``'s last save (``state._snapshot()``) to the durable folder on rank 0;
    every rank learns the outcome by ``bcast_object`` (a collective). Nothing without the
    variable.

    Raises:
        OSError: on every rank, when rank 0 could not write (the message is rank 0's).
    """
    if folder() is None:
        return
    error = None
    if rank() == 0:
        try:
            store = _store()
            newest = store.latest()
            store.write(0, (newest[1] if newest else 0) + 1, state._snapshot(), sync=True)
        except OSError as e:
            error = "rank 0 could not write the durable commit to %s: %s" % (folder(), e)
    error = bcast_object(error, root_rank=0)
    if error:
        raise OSError(error)


def latest():
    """(0, sequence, path) of the newest durable commit this rank sees, or None (also when
    the variable is unset, or the folder fails the check: then with a warning)."""
    if folder() is None:
        return None
    try:
        return _store().latest()
    except OSError as e:
        get_logger().warning("hvd.elastic: no durable commit read: %s", e)
        return None


def read(path):
    """The durable commit at ``path`` (see CommitStore.read)."""
    return _store().read(path)


def remove():
    """Removes the durable commits (rank 0, when the training function returned)."""
    if folder() is not None and rank() == 0:
        _store().remove()
