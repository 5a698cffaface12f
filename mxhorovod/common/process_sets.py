"""Process sets: collectives among a subset of the ranks (Horovod 0.28's API).

    even = hvd.ProcessSet([0, 2])
    hvd.init(process_sets=[even])          # every rank passes the same list
    if even.included():
        hvd.allreduce(x, process_set=even)  # negotiated among ranks 0 and 2 only

A set negotiates and runs on its own MPI communicator, with its own coordinator (its
lowest rank), response cache and fusion buffer: a collective on {0, 2} never waits for
rank 1. Inside a set, ranks are numbered 0..size-1 in the order of their job ranks
(``ps.rank()``); allgather, alltoall and reducescatter use that order, while a broadcast's
``root_rank`` is a job rank that must be a member (both as in Horovod).
With ``HOROVOD_DYNAMIC_PROCESS_SETS=1`` (or ``init(process_sets="dynamic")``) sets can be
added and removed after ``init``: every rank of the job calls ``add_process_set`` /
``remove_process_set`` with the same arguments in the same order.
"""
import weakref

import mxhorovod._core as _core
from mxhorovod.common import naming, state
from mxhorovod.common.errors import InvalidArgumentError

__all__ = ["ProcessSet", "global_process_set", "add_process_set", "remove_process_set"]


class ProcessSet:
    """A set of ranks of the job, given as a list of ranks or an mpi4py communicator
    (its ranks in MPI_COMM_WORLD).

    Attributes:
        process_set_id: int once registered (0 for the global set), else None; None again
            after ``shutdown()`` (ids are numbered afresh in each session; pass the set to
            ``init()`` or ``add_process_set()`` again).
        ranks: the job ranks, ascending (None for the global set before init).
        mpi_comm: the mpi4py communicator it was made from, if any.
    """

    def __init__(self, ranks_or_comm):
        self.process_set_id = None
        self.mpi_comm = None
        if hasattr(ranks_or_comm, "Get_group"):
            # The ranks are resolved by init() / add_process_set() against the job's
            # communicator (which need not be COMM_WORLD), from the members' communicators:
            # a rank outside the set holds MPI.COMM_NULL (Horovod's documented
            # Split(color=MPI.UNDEFINED) pattern) and learns the ranks from the members.
            # Until then ``ranks`` is the COMM_WORLD ranks, or None for MPI.COMM_NULL.
            from mpi4py import MPI
            self.mpi_comm = ranks_or_comm
            self.ranks = None
            if ranks_or_comm != MPI.COMM_NULL:
                group = ranks_or_comm.Get_group()
                self.ranks = sorted(MPI.Group.Translate_ranks(
                    group, list(range(group.Get_size())), MPI.COMM_WORLD.Get_group()))
            return
        else:
            try:
                ranks = [int(r) for r in ranks_or_comm]
            except TypeError:
                raise TypeError("ProcessSet takes a list of ranks or an mpi4py communicator, "
                                "not %s" % type(ranks_or_comm).__name__) from None
        if len(set(ranks)) != len(ranks):
            raise ValueError("ProcessSet(%r): a rank is listed twice" % (list(ranks),))
        self.ranks = sorted(ranks)

    def _info(self):
        if self.process_set_id is None:
            return None
        for entry in _core.process_sets():
            if entry[0] == self.process_set_id:
                return entry
        return None

    def size(self):
        """Number of ranks in the set; None if the set is not registered (or not running)."""
        info = self._info()
        return None if info is None else info[4]

    def rank(self):
        """This process's rank within the set (0..size-1); None if the set is not
        registered or this process is not a member."""
        info = self._info()
        return None if info is None or not info[2] else info[3]

    def included(self):
        """True if this process is a member; None if the set is not registered."""
        info = self._info()
        return None if info is None else bool(info[2])

    def _invalidate(self):
        self.process_set_id = None

    def __eq__(self, other):
        return isinstance(other, ProcessSet) and self.ranks == other.ranks

    def __hash__(self):
        return hash(tuple(self.ranks or ()))

    def __str__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s, mpi_comm=%s)" % (
            self.process_set_id, self.ranks, self.mpi_comm)

    __repr__ = __str__

    def __reduce__(self):
        # Pickled as its ranks only: an id is valid in one session of one job, so a copied
        # id named whichever set has it where the pickle is loaded (a DistributedOptimizer
        # in gluon.Trainer.save_states, loaded after a new init(): the ranks reduced over
        # another set or none, silently). Loaded, it is the set registered now with those
        # ranks (see unpickle_set).
        return (unpickle_set, (None if self.ranks is None else list(self.ranks),))


def unpickle_set(ranks):
    """A ProcessSet loaded from a pickle: the set with ``ranks`` registered in this
    session, if any (the very object, so it loses its id at shutdown() with the others);
    else a new, unregistered ProcessSet of those ranks (a collective on it raises "not
    registered" until it is passed to init() or add_process_set())."""
    if ranks is not None:
        for ps in list(_holding_ids.values()):
            if ps.process_set_id is not None and ps.ranks is not None and \
                    list(ps.ranks) == ranks:
                return ps
        return ProcessSet(ranks)
    ps = ProcessSet.__new__(ProcessSet)  # a communicator's set of unknown ranks
    ps.process_set_id, ps.mpi_comm, ps.ranks = None, None, None
    return ps


class _GlobalProcessSet(ProcessSet):
    """Every rank of the job; id 0; exists while mxhorovod runs."""

    def __init__(self):
        self.process_set_id = 0
        self.mpi_comm = None

    @property
    def ranks(self):
        info = self._info()
        return None if info is None else list(info[1])

    def _invalidate(self):  # the global set is never removed
        pass

    def __eq__(self, other):
        return isinstance(other, _GlobalProcessSet)

    def __hash__(self):
        return 0

    def __reduce__(self):
        return "global_process_set"  # loaded as this module's one global set


global_process_set = _GlobalProcessSet()

# Pickles name module paths. A pickled set names the face mxhorovod.process_sets (the path
# 0.1.0 wrote and reads), not this module, so files written now load in 0.1.0 and survive
# moves of this code: unpickle_set pickles as mxhorovod.process_sets._unpickle, and the
# global set as mxhorovod.process_sets.global_process_set.
unpickle_set.__module__ = _GlobalProcessSet.__module__ = "mxhorovod.process_sets"
unpickle_set.__qualname__ = "_unpickle"


def set_id(process_set, what):
    """The id to send to the core for ``process_set`` (checked to be a registered set)."""
    if process_set is None or process_set is global_process_set:
        return 0
    if not isinstance(process_set, ProcessSet):
        raise TypeError("%s: process_set must be an hvd.ProcessSet, not %s"
                        % (what, type(process_set).__name__))
    if process_set.process_set_id is None:
        raise InvalidArgumentError("%s: %s is not registered; pass it to hvd.init(process_sets=[...]) or "
                         "hvd.add_process_set() first" % (what, process_set))
    return process_set.process_set_id


def outside(process_set):
    """True when this rank is not a member of ``process_set`` (never for the global set,
    without asking the core: this runs for every update of a trainer or optimizer)."""
    return process_set is not global_process_set and process_set.included() is False


def check_member(process_set, what):
    """Raises ValueError unless ``process_set`` is registered and this rank is in it."""
    pid = set_id(process_set, what)
    if pid != 0 and process_set.included() is False:
        raise InvalidArgumentError("%s: this rank (%d) is not in process set %d (ranks %s)"
                         % (what, _core.topology()[0], pid, process_set.ranks))
    return pid


def set_size(process_set, what):
    """Number of ranks of a registered set (the job size for the global set)."""
    pid = set_id(process_set, what)
    for entry in _core.process_sets():
        if entry[0] == pid:
            return entry[4]
    if pid == 0 or not _core.is_initialized():
        # Stopped (a peer's shutdown or a stall) after the set was registered: says so.
        raise ValueError(state.not_initialized(what))
    raise InvalidArgumentError("%s: process set %d is not registered" % (what, pid))


def resolve_comm_sets(sets, job_comm, what):
    """Gives each set made from an mpi4py communicator its ranks in the job (``job_comm``'s
    numbering): every rank of the job calls this with the same sets, the members holding
    the set's communicator and the others MPI.COMM_NULL; one allgather over the job tells
    everyone the members. Raises ValueError on every rank alike when a set has no member or
    members outside the job, or the ranks disagree."""
    from mpi4py import MPI
    job_group = job_comm.Get_group()
    mine = []
    for ps in sets:
        if ps.mpi_comm == MPI.COMM_NULL:
            mine.append(None)
            continue
        group = ps.mpi_comm.Get_group()
        ranks = MPI.Group.Translate_ranks(group, list(range(group.Get_size())), job_group)
        mine.append(sorted(r if r != MPI.UNDEFINED else -1 for r in ranks))
    everyone = job_comm.allgather(mine)
    for i, ps in enumerate(sets):
        seen = [lst[i] for lst in everyone if lst[i] is not None]
        if not seen:
            raise ValueError("%s: the process set made from an MPI communicator has no member "
                             "(MPI.COMM_NULL on every rank)" % what)
        if any(lst != seen[0] for lst in seen):
            raise ValueError("%s: the ranks passed different MPI communicators for one process "
                             "set (members saw %s)" % (what, sorted(set(map(tuple, seen)))))
        if -1 in seen[0]:
            raise ValueError("%s: a process set's MPI communicator has ranks outside the job "
                             "(the communicator given to hvd.init())" % what)
        ps.ranks = list(seen[0])


def static_sets(process_sets):
    """init()'s ``process_sets`` argument as (list of ProcessSet, dynamic flag)."""
    if process_sets is None:
        return [], False
    if isinstance(process_sets, str):
        if process_sets != "dynamic":
            raise ValueError("init(process_sets=%r): expected a list of ProcessSet or 'dynamic'"
                             % process_sets)
        return [], True
    sets = []
    for ps in process_sets:
        if isinstance(ps, _GlobalProcessSet):
            continue
        if not isinstance(ps, ProcessSet):
            ps = ProcessSet(ps)
        sets.append(ps)
    check_distinct([p for p in sets if p.mpi_comm is None])
    return sets, False


def check_distinct(sets):
    if len(set(tuple(p.ranks) for p in sets)) != len(sets):
        raise ValueError("init(process_sets=...): the same ranks are listed in two sets")


# The sets given an id in this session of the core (id(set) -> set). Ids are unique only
# within a session: every init() numbers its sets from 1 again, so a set kept from an earlier
# session would name whichever new set got its id (a collective on other ranks, or a hang).
_holding_ids = weakref.WeakValueDictionary()


def _hold(ps):
    if ps.process_set_id is not None:
        _holding_ids[id(ps)] = ps


def end_session():
    """At shutdown() (the only way a session ends; the next init() numbers its sets from 1
    again): every set registered in it loses its id (``process_set_id`` None; a collective on
    it raises "not registered" until it is passed to init() or add_process_set() again)."""
    for ps in list(_holding_ids.values()):
        ps._invalidate()
    _holding_ids.clear()


def registered(sets):
    """After init: gives the static sets their ids (1, 2, ... in list order)."""
    ids = {tuple(entry[1]): entry[0] for entry in _core.process_sets()}
    for ps in sets:
        # None: init() was already running (or the set's ranks were not resolved then)
        ps.process_set_id = None if ps.ranks is None else ids.get(tuple(ps.ranks))
        _hold(ps)


def add_process_set(process_set):
    """Register a new process set on every rank; returns it (with its id).

    Every rank of the job must call this with the same ranks, in the same order relative to
    other add/remove calls; it blocks until all have. Needs HOROVOD_DYNAMIC_PROCESS_SETS=1
    or ``init(process_sets="dynamic")``.

    Args:
        process_set: a ProcessSet or a list of ranks.
    Raises:
        ValueError: dynamic process sets are off, the set is already registered (or one
            with the same ranks is), a rank is out of range or listed twice, or the ranks
            disagree on the set (on every rank).
    """
    if not isinstance(process_set, ProcessSet):
        process_set = ProcessSet(process_set)
    if process_set.process_set_id is not None:
        raise ValueError("Attempted to add process set that has been registered before: %s"
                         % process_set)
    if process_set.mpi_comm is not None:
        resolve_comm_sets([process_set], state.job_comm(), "add_process_set")
    process_set.process_set_id = _core.add_process_set(process_set.ranks)
    _hold(process_set)
    return process_set


def remove_process_set(process_set):
    """Remove a registered process set on every rank (a collective like add_process_set).

    Operations still pending on the set fail with an error saying it was removed. Returns
    True when the set was removed, False when it was not registered or is the global set
    (which is never removed), as Horovod does.

    Raises:
        ValueError: dynamic process sets are off.
    """
    if (isinstance(process_set, _GlobalProcessSet) or not isinstance(process_set, ProcessSet)
            or process_set.process_set_id is None):
        return False
    pid = process_set.process_set_id
    _core.remove_process_set(pid)
    naming.forget_set(pid)  # ids are not reused within a session: its numbers are done with
    process_set._invalidate()
    return True
