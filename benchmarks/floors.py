"""The floors: plain mpi4py strategies on numpy arrays of the same sizes, measured in the
same mpirun as the library under test, so a ratio to them is free of the machine's drift.

Strategies (each an in-place float32 MPI_SUM over MPI_COMM_WORLD, one step = all arrays):

- ``per_call``: one ``comm.Allreduce`` per array.
- ``pack_one_call``: copy every array into one preallocated flat buffer, one Allreduce,
  copy back (what a fusion buffer does).
- ``pack_sliced_<k>MiB``: the same with the flat buffer reduced in k MiB calls. MPICH
  allocates a message-sized temporary per call, which glibc maps and unmaps afresh from
  32 MiB up, so slices of 1-16 MiB beat one huge call.
- ``contiguous_one_call`` / ``contiguous_sliced_<k>MiB``: the data already in one flat
  buffer (no packing): the floor for gradients kept as views of contiguous buckets.
- ``copy``: one numpy copy of the whole set (what each packing pass costs).

Each reducing strategy is measured twice: with MPI's built-in ``MPI.SUM`` and, suffixed
``_userop``, with a user-defined sum (``MPI.Op.Create`` over ``numpy.add``), because
MPICH's built-in sum is not the fastest reduction on every build and the library under
test may use its own op (mxhorovod does); the derived floors take the faster.
"""
import numpy as np
from mpi4py import MPI

from common import MiB, timed, timed_pair

SLICE_SIZES = (1 * MiB, 4 * MiB, 16 * MiB)


_NUMPY_OF = {}  # MPI datatype handle -> numpy dtype, for the user-defined sum
_USER_SUM = []  # the one user-defined sum op of the process, made on first use


def _numpy_add(inbuf, inoutbuf, datatype):
    dt = _NUMPY_OF[datatype.py2f()]
    out = np.frombuffer(inoutbuf, dtype=dt)
    np.add(np.frombuffer(inbuf, dtype=dt), out, out=out)


def user_sum():
    """The commutative user-defined MPI sum (numpy.add) for float32/float64 buffers (one
    per process, never freed)."""
    if not _USER_SUM:
        _NUMPY_OF.update({MPI.FLOAT.py2f(): np.float32, MPI.DOUBLE.py2f(): np.float64})
        _USER_SUM.append(MPI.Op.Create(_numpy_add, commute=True))
    return _USER_SUM[0]


def per_call(comm, arrays, op=MPI.SUM):
    for a in arrays:
        comm.Allreduce(MPI.IN_PLACE, a, op=op)


def sliced(comm, flat, slice_bytes, op=MPI.SUM):
    """Allreduce ``flat`` in calls of at most ``slice_bytes`` (0: one call)."""
    n = flat.size if slice_bytes <= 0 else max(1, slice_bytes // flat.itemsize)
    for off in range(0, flat.size, n):
        comm.Allreduce(MPI.IN_PLACE, flat[off:off + n], op=op)


def pack(arrays, flat):
    np.concatenate([a.reshape(-1) for a in arrays], out=flat)


def unpack(flat, arrays):
    off = 0
    for a in arrays:
        n = a.size
        a.reshape(-1)[:] = flat[off:off + n]
        off += n


def strategy_step(comm, arrays, flat, strategy):
    """One step of a strategy by its name in the tables (``per_call``, ``pack_*``,
    ``contiguous_*``, each optionally ``_userop``) on ``arrays`` (separate numpy arrays)
    and ``flat`` (one buffer of their total size): a callable."""
    op = user_sum() if strategy.endswith("_userop") else MPI.SUM
    name = strategy[:-len("_userop")] if strategy.endswith("_userop") else strategy
    if name == "per_call":
        return lambda: per_call(comm, arrays, op)
    kind, _, rest = name.partition("_")
    slice_bytes = 0 if rest == "one_call" else int(rest[len("sliced_"):-len("MiB")]) * MiB
    if kind == "contiguous":
        return lambda: sliced(comm, flat, slice_bytes, op)

    def packed():
        pack(arrays, flat)
        sliced(comm, flat, slice_bytes, op)
        unpack(flat, arrays)
    return packed


def interleaved(comm, shapes, strategy, step, reps):
    """``step`` timed in alternation with the floor ``strategy`` on numpy arrays of
    ``shapes`` (both then see the same moments of a noisy machine; a floor measured
    minutes earlier can be off by 30% here). Returns (stats of step, stats of the floor
    with its ``strategy`` named '..., interleaved')."""
    # Each rank timed the floors itself and may have seen another winner: rank 0's counts.
    strategy = comm.bcast(strategy, root=0)
    arrays = [np.zeros(sh, dtype=np.float32) for sh in shapes]
    flat = np.zeros(sum(a.size for a in arrays), dtype=np.float32)
    ours, floor = timed_pair(step, strategy_step(comm, arrays, flat, strategy), reps,
                             barrier=comm.Barrier)
    return ours, dict(floor, strategy=strategy + ", interleaved")


def _best(table, prefix):
    keys = [k for k in table if k.startswith(prefix)]
    k = min(keys, key=lambda k: table[k]["median"])
    return dict(table[k], strategy=k)


def measure(comm, shapes, reps, contiguous=True, slices=SLICE_SIZES, dtype=np.float32):
    """Times the strategies above on zero-filled arrays of ``shapes`` (sums of zeros stay
    zero, so repeated steps never overflow). Returns {strategy: stats} plus the derived
    entries ``pack_best`` (fastest packing variant), ``floor`` (the fastest of per_call
    and the packing variants: the best plain strategy for separate arrays) and, with
    ``contiguous``, ``contiguous_best`` (fastest of one call and the slices); each
    derived entry names its ``strategy``. All ranks must call it together."""
    arrays = [np.zeros(s, dtype=dtype) for s in shapes]
    total = sum(a.size for a in arrays)
    flat = np.zeros(total, dtype=dtype)
    ways = ["one_call"] + ["sliced_%dMiB" % (sb // MiB) for sb in slices
                           if sb < total * flat.itemsize]
    layouts = ("pack", "contiguous") if contiguous else ("pack",)
    names = ["per_call"] + ["%s_%s" % (layout, way) for layout in layouts for way in ways]
    out = {}
    for suffix in ("", "_userop"):
        for name in names:
            out[name + suffix] = timed(strategy_step(comm, arrays, flat, name + suffix), reps,
                                       barrier=comm.Barrier)
    if contiguous:
        dst = np.empty_like(flat)
        out["copy"] = timed(lambda: np.copyto(dst, flat), reps)
    out["pack_best"] = _best(out, "pack_")
    out["floor"] = min((_best(out, "per_call"), out["pack_best"]), key=lambda s: s["median"])
    if contiguous:
        out["contiguous_best"] = _best(out, "contiguous_")
    return out
