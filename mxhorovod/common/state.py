"""The running session as every module sees it: the topology, the job's communicator, and
the error text of a call made while mxhorovod is not running.

The lowest module of the package above the extension: the modules that start, name and
group collectives (basics, naming, process_sets) all read it; it imports none of them.
"""
import mxhorovod._core as _core

__all__ = ["not_initialized", "topology", "set_init_comm", "job_comm", "world_rank"]


def not_initialized(what=None):
    """The message of a call made when mxhorovod is not running: never initialized, or
    stopped (a peer's shutdown, a stall): then the reason, without the advice to call
    init() (the script did; a peer that finished its steps first stopped it)."""
    head = "%s: " % what if what else ""
    reason = _core.stop_reason()
    if reason:
        return head + "Horovod is not initialized any more (stopped: %s)" % reason
    return head + "Horovod has not been initialized; use hvd.init()."


def topology():
    """(rank, size, local_rank, local_size, cross_rank, cross_size, ...) of the running
    session. Raises ValueError when mxhorovod is not running."""
    topo = _core.topology()
    if topo[0] < 0:
        raise ValueError(not_initialized())
    return topo


_init_comm = None      # the ``comm`` given to init()
_job_comm_cache = {}   # init(comm=[ranks]) -> its mpi4py communicator


def set_init_comm(comm):
    """Records the ``comm`` of the ``init()`` that starts a session."""
    global _init_comm
    _init_comm = comm


def world_rank():
    """This process's rank in MPI_COMM_WORLD (through mpi4py)."""
    from mpi4py import MPI  # optional: only process sets made from communicators need it
    return MPI.COMM_WORLD.Get_rank()


def job_comm():
    """The job's communicator as an mpi4py object (for process sets made from mpi4py
    communicators): COMM_WORLD, the one given to init(), or the one of init's rank list
    (made once, by the members only; None on a rank that is not in the list)."""
    from mpi4py import MPI  # optional: only process sets made from communicators need it
    if _init_comm is None:
        return MPI.COMM_WORLD
    if not isinstance(_init_comm, (list, tuple)):
        return _init_comm
    key = tuple(int(r) for r in _init_comm)
    if key not in _job_comm_cache:
        if MPI.COMM_WORLD.Get_rank() not in key:
            return None
        group = MPI.COMM_WORLD.Get_group().Incl(list(key))
        _job_comm_cache[key] = MPI.COMM_WORLD.Create_group(group)
    return _job_comm_cache[key]
