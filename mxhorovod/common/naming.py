"""Automatic collective names that every rank derives alike.

The ranks match a collective by its name, so an automatic name must come out the same on
every rank that takes part.
Names are numbered per kind and per process set, in call order: a rank's calls on a set the
others are not in, or helpers it made but never used, do not shift the shared numbers.
A process set id is unique only within one session of the core: :func:`forget_set` drops a
set's numbers when it is removed, and :func:`new_session` when ``init()`` starts anew (the
global set's too when the new session has other ranks than the last).
A number is taken only while mxhorovod runs: a call before ``init()`` or after
``shutdown()`` is refused and takes none.
"""
import itertools

import mxhorovod._core as _core
from mxhorovod.common.errors import InvalidArgumentError
from mxhorovod.common.state import not_initialized

_counters = {}


def next_number(kind, process_set_id):
    """0, 1, 2, ... per (``kind``, ``process_set_id``), in this process's call order.

    Raises InvalidArgumentError (a ValueError), taking no number, when mxhorovod is not
    running (before ``init()``, after ``shutdown()`` or a stop): the call that asked would
    be refused anyway."""
    if not _core.is_initialized():
        raise InvalidArgumentError(not_initialized(kind))
    key = (kind, int(process_set_id))
    counter = _counters.get(key)
    if counter is None:
        counter = _counters.setdefault(key, itertools.count())
    return next(counter)


def _drop(sets):
    """Drops the numbers of the sets whose id ``sets(id)`` is true."""
    for key in [k for k in _counters if sets(k[1])]:
        del _counters[key]


def forget_set(process_set_id):
    """The set ``process_set_id`` is gone (removed): its numbers are dropped."""
    pid = int(process_set_id)
    _drop(lambda i: i == pid)


_members = None  # the MPI_COMM_WORLD ranks of the session the global set's numbers are from


def new_session(members):
    """``init()`` starts the core anew, its job made of the MPI_COMM_WORLD ranks
    ``members`` (a tuple): the sets' ids start from 1 again, so their numbers do too. The
    global set's (id 0 in every session) are kept when the job has the same ranks as the
    last session's: every one of them made the same calls on it, so they agree, and objects
    made before (a trainer's prefix) keep names distinct from those made after. When the
    ranks changed they start from 0 again: the ranks came from different sessions
    (``init(comm=[0, 1])`` on ranks 0 and 1, ``init(comm=[2])`` on rank 2, then ``init()``
    on all three), or from none, and had made different numbers of calls there (kept, the
    first unnamed call of the new session was 'allreduce.noname.3' on some ranks and
    'allreduce.noname.1' on others: every rank waited forever)."""
    global _members
    if members == _members:
        _drop(lambda i: i != 0)
    else:
        _counters.clear()
    _members = members


def session_members():
    """The MPI_COMM_WORLD ranks of the job of the last ``init()`` (a sorted tuple), or None
    before the first."""
    return _members
