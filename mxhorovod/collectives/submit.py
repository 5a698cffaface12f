"""The plain submission path of every collective: checks at the call, the automatic
name, and one asynchronous operation pushed into MXNet's dependency engine through the
extension. :mod:`mxhorovod.collectives.ops` is the public face (it adds autograd); the
differentiable wrappers (:mod:`mxhorovod.collectives.autograd`) call this module too.
"""
import contextlib
import math
import operator
import os
import re
import threading

import mxnet as mx
from mxnet.base import MXNetError
import numpy as np

import mxhorovod._core as _core
from mxhorovod.common.errors import InvalidArgumentError
from mxhorovod.common.naming import next_number
from mxhorovod.common.process_sets import global_process_set, set_id, set_size
from mxhorovod.common.state import topology
from mxhorovod.common.user_warning import warn_user

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce_", "grouped_allreduce", "grouped_allreduce_", "broadcast_", "grouped_allgather",
    "grouped_reducescatter", "gradient_reduction",
    "allreduce_plain", "broadcast_plain", "grouped_allgather_plain", "alltoall_plain",
    "call_name", "refuse", "settle", "recording", "differentiable",
]

# Numbering of horovod.common.basics.
#: ``op=`` of :func:`allreduce` and :func:`reducescatter` (their default): the sum over the
#: ranks divided by their number. Integers truncate toward zero. Value 0.
Average = 0
#: ``op=``: the elementwise sum over the ranks. Integers wrap around on overflow. Value 1.
Sum = 1
#: ``op=`` of :func:`allreduce` (and ``allreduce_``, ``grouped_allreduce``,
#: ``grouped_allreduce_``): Horovod's Adasum, Adasum(a, b) = (1 - a.b / (2|a|^2)) a +
#: (1 - a.b / (2|b|^2)) b combined along a binary tree over the ranks in rank order, each
#: tensor on its own; any number of ranks, float16/32/64 only, no scale factors (see
#: docs/collectives.md). Value 2.
Adasum = 2
#: ``op=`` of :func:`allreduce`: the elementwise minimum. A NaN on any rank wins, and -0 is
#: below +0, so every rank gets the same bits. Value 3.
Min = 3
#: ``op=`` of :func:`allreduce`: the elementwise maximum (NaN and -0 as for :data:`Min`).
#: Value 4.
Max = 4
#: ``op=`` of :func:`allreduce`: the elementwise product over the ranks. Value 5.
Product = 5
_OP_NAMES = {Average: "Average", Sum: "Sum", Adasum: "Adasum", Min: "Min", Max: "Max",
             Product: "Product"}


def op_name(op):
    """The name of a reduce op ("Sum"), or its repr when it is none of them."""
    try:
        return _OP_NAMES.get(op, repr(op))
    except TypeError:  # unhashable
        return repr(op)

def call_name(kind, name, pid=0):
    """The name sent to the peers: str(name), or for None or '' (Horovod takes '' as well)
    '<kind>.noname.<n>' numbered per kind and process set (``pid``), see
    :mod:`mxhorovod.common.naming`.

    Raises ValueError for a name the peers could not match exactly: one holding a NUL
    character (C would cut it there) or one that is not valid Unicode text."""
    if name is None or (type(name) is str and not name):  # Horovod also takes name=''
        return "%s.noname.%d" % (kind, next_number(kind, pid))
    # A str subclass (numpy.str_, an enum's value, ...) by its characters, as Horovod
    # encodes it: its own __str__ may differ between ranks or from the text.
    name = name if type(name) is str else str.__str__(name) if isinstance(name, str) else str(name)
    if "\0" in name:
        raise InvalidArgumentError("%s: the name %r holds a NUL character" % (kind, name))
    if not name.isascii():  # ASCII, the common case, needs no encoding check
        try:
            name.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidArgumentError("%s: the name %r is not valid Unicode text" % (kind, name)) from None
    return name


def _integer(value, what, name):
    """``value`` as an int: int, bool or a numpy integer; a float or a string raises
    TypeError (as Horovod's c_int does) instead of being truncated or parsed."""
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError("'%s': %s must be an integer, got %r" % (name, what, value)) from None


def _priority(priority, name):
    if type(priority) is int and -2**31 <= priority < 2**31:
        return priority  # the common case, once per gradient per step
    p = _integer(priority, "priority", name)
    if not -2**31 <= p < 2**31:
        raise InvalidArgumentError("'%s': priority %d does not fit in a 32-bit int" % (name, p))
    return p


def _factor(value, what, name):
    if type(value) is float and math.isfinite(value):
        return value  # the common case (the 1.0 default), once per gradient per step
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise InvalidArgumentError("'%s': %s must be a real number, got %r" % (name, what, value)) from None
    if not math.isfinite(v):
        raise InvalidArgumentError("'%s': %s must be a finite number, got %r" % (name, what, value))
    return v


_NDArray = mx.nd.NDArray


def _check_ndarray(tensor, what):
    if not isinstance(tensor, _NDArray):
        if isinstance(tensor, mx.sym.Symbol):  # a hybridized HybridBlock's hybrid_forward
            raise TypeError(
                "%s expects an mxnet NDArray, got a Symbol: a collective cannot be part of a "
                "hybridized graph (HybridBlock.hybridize() traces hybrid_forward with "
                "Symbols); call it in a block that is not hybridized, or outside the "
                "hybridized block" % what)
        raise TypeError("%s expects an mxnet NDArray, got %s" % (what, type(tensor).__name__))


def _handle(arr):
    return arr.handle.value


recording = _core.is_recording  # mx.autograd.is_recording(), a C call instead of ctypes


def differentiable(tensor):
    """A floating-point NDArray (inside ``autograd.record()``: the call is recorded, see
    :mod:`mxhorovod.collectives.autograd`); anything else takes the plain path and its checks."""
    return isinstance(tensor, _NDArray) and np.dtype(tensor.dtype).kind == "f"


def refuse(kind, names, pid, error, n=1):
    """This rank refused its call with ``error`` (its own checks, after the call's name was
    taken): the same call fails on the other ranks of the set, naming this rank and the
    reason, instead of waiting for it; and an unnamed call keeps its number, so this rank's
    next unnamed call cannot meet the peers' refused one. ``names``: a list, or a group's
    base name for ``n`` tensors. See SubmitRefused (src/mxnet/engine_op.h)."""
    try:
        _core.refuse(kind, names, n, pid, "%s: %s" % (type(error).__name__, error))
    except Exception:  # stopped meanwhile: the caller's error is what matters
        pass


def _resolve_op(op, average, what):
    """Horovod's rule: `op` supersedes the deprecated `average`; the default is Average."""
    if op is not None and average is not None:
        raise InvalidArgumentError("The op parameter supersedes average. Please provide only one of them.")
    if average is not None:
        warn_user("Parameter `average` has been replaced with `op` and will be removed "
                  "in a future release", DeprecationWarning)
        return Average if average else Sum
    if op is None:
        return Average
    try:
        code = operator.index(op)  # 1.0 or "1" is no op (and a list is not hashable)
    except TypeError:
        code = None
    if code not in _OP_NAMES:
        raise InvalidArgumentError("%s: unknown reduce op %r (use hvd.Sum, hvd.Average, "
                                   "hvd.Adasum, hvd.Min, hvd.Max or hvd.Product)" % (what, op))
    return code


def _mkldnn_enabled():
    """Whether MXNet's MKLDNN (oneDNN) kernels run in this process: built in, and not
    turned off by MXNET_MKLDNN_ENABLED=0 (read by MXNet once, at its start)."""
    if os.environ.get("MXNET_MKLDNN_ENABLED", "1").strip() == "0":
        return False
    try:
        return mx.runtime.Features().is_enabled("MKLDNN")
    except Exception:  # a build without the feature list
        return False


# Whether arrays may be in MKLDNN's blocked layout (read by training/sync_batch_norm too).
MKLDNN = _mkldnn_enabled()


class _ThreadState(threading.local):
    gradients = False  # a class default: reading it raises and catches nothing (0.05 us
    #                    against 0.5 us for getattr(local, name, default) on a miss)


_local = _ThreadState()


@contextlib.contextmanager
def gradient_reduction():
    """Marks the allreduces issued inside as gradient reductions: they never wait for the
    arrays' pending writes (see :func:`_settle`). Used by DistributedTrainer and
    DistributedOptimizer, whose gradient arrays are never in MKLDNN's layout."""
    prev = _local.gradients
    _local.gradients = True
    try:
        yield
    finally:
        _local.gradients = prev


def settle():
    """Whether the core must settle the layout of the inputs before the call returns: it
    then waits for the pending writes and reads of any array that MXNet's MKLDNN backend may
    be about to convert to its own layout (a float32 array of 2 to 5 dimensions that is not
    a fresh gradient; an inference-mode forward pass does that to weights), so the core
    reads it in the default layout. False without MKLDNN and inside gradient_reduction():
    the gradient path stays asynchronous. If a conversion still slips through, the
    collective fails on every rank with an error that names the tensor; it never hangs."""
    return MKLDNN and not _local.gradients


def _broadcast_wait():
    """What the core waits for before a broadcast reads its input (``wait`` of
    ``_core.broadcast``): with MKLDNN, the input's writers AND readers, then the default
    layout (an inference-mode forward READS the weight and may reorder it into MKLDNN's
    layout while it runs, so waiting for its writers alone can miss a reorder still to come;
    seen under load; not when a collective of ours still reads it); else its writers. If
    that wait raises the error of the operation that wrote the input, every rank's
    broadcast fails (naming this rank) and this rank raises it at the call."""
    return 2 if MKLDNN else 1


def _empty_like(tensor, shape=None):
    """An uninitialised array like ``tensor`` (an mx.np array for an mx.np input)."""
    shape = tensor.shape if shape is None else shape
    if isinstance(tensor, mx.np.ndarray):
        return mx.np.empty(shape, dtype=tensor.dtype, ctx=tensor.context)
    return mx.nd.empty(shape, ctx=tensor.context, dtype=tensor.dtype)


def allreduce_plain(tensor, output, average, name, priority, prescale_factor, postscale_factor,
                    op, process_set, what):
    """``output``: None for a new array, else ``tensor`` (in place)."""
    pid = set_id(process_set, what)
    name = call_name("allreduce", name, pid)
    try:  # this rank's checks: a refusal fails the peers' call too (_refuse)
        _check_ndarray(tensor, what)
        op, pre, post, priority = _reduction(op, average, prescale_factor, postscale_factor,
                                             priority, name, what)
        if output is None:
            output = _empty_like(tensor)
        elif recording():  # one C call per in-place call when nothing records
            _check_not_in_graph(tensor, what, name)
    except Exception as e:
        refuse("allreduce", [name], pid, e)
        raise
    _core.allreduce(_handle(tensor), _handle(output), name, op, pre, post, priority, pid,
                    settle())
    return output


def allreduce_(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
               postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place :func:`allreduce`: ``tensor`` receives the result; returns ``tensor``.

    Not recorded by autograd: inside ``autograd.record()`` an array that is part of the
    recorded graph is refused (InvalidArgumentError, as MXNet refuses ``x[:] = ...``
    there); use :func:`allreduce`, which is differentiated."""
    if (type(name) is str and name and name.isascii() and "\0" not in name
            and (op is None or (type(op) is int and op in _PLAIN_OPS)) and average is None
            and (process_set is global_process_set or process_set is None)
            and type(prescale_factor) is float and type(postscale_factor) is float
            and prescale_factor == 1.0 and postscale_factor == 1.0
            and type(priority) is int and -2**31 <= priority < 2**31
            and isinstance(tensor, _NDArray) and not recording()):
        # The per-gradient call (a str name, default factors, the global set): what
        # allreduce_plain would check and send the core, without its calls (0.6 -> 0.3 us;
        # tests/collectives/test_call_path.py compares both paths).
        h = tensor.handle.value
        _core.allreduce(h, h, name, Average if op is None else op, 1.0, 1.0, priority, 0,
                        MKLDNN and not _local.gradients)
        return tensor
    return allreduce_plain(tensor, tensor, average, name, priority, prescale_factor,
                           postscale_factor, op, process_set, "allreduce_")


# Ops a call may pass as a plain int, as Horovod's module constants are.
_PLAIN_OPS = frozenset((Average, Sum, Min, Max, Product))


def _reduction(op, average, prescale_factor, postscale_factor, priority, name, what):
    """A reduction's checked (op, prescale, postscale, priority)."""
    if ((op is None or (type(op) is int and op in _PLAIN_OPS)) and average is None
            and type(prescale_factor) is float and type(postscale_factor) is float
            and prescale_factor == 1.0 and postscale_factor == 1.0 and type(priority) is int
            and -2**31 <= priority < 2**31):
        # The common call (no op, hvd.Sum or hvd.Average, default factors): what the checks
        # below would return, without their calls (1.3 -> 0.3 us, per tensor per step).
        return Average if op is None else op, 1.0, 1.0, priority
    op = _resolve_op(op, average, what)
    pre = _factor(prescale_factor, "prescale_factor", name)
    post = _factor(postscale_factor, "postscale_factor", name)
    if op == Adasum and (pre != 1.0 or post != 1.0):
        # Not linear: a factor outside Adasum is not one inside it (the core refuses it too).
        raise InvalidArgumentError(
            "%s '%s': Adasum takes no prescale_factor or postscale_factor (got %g and %g); "
            "scale the tensor or the result" % (_kind(what), name, pre, post))
    return op, pre, post, _priority(priority, name)


def _kind(what):
    """The collective's name in errors, as the core writes it ('allreduce')."""
    return "allreduce" if "allreduce" in what else what


def _check_not_in_graph(tensor, what, name):
    """Called inside ``autograd.record()`` (the callers test it first): refuses to write a collective's result into an array
    that is part of the graph being recorded (MXNet refuses ``x[:] = ...`` and ``x += 1``
    there: 'Assigning to NDArrays that are already in a computational graph'). An in-place
    collective went past that check: the array changed behind autograd's back, and its
    gradient ignored the collective (a Sum over n ranks: n times too small), silently."""
    if not isinstance(tensor, _NDArray):
        return
    try:
        mx.autograd.get_symbol(tensor)  # raises for an array autograd does not track
    except MXNetError:
        return
    raise InvalidArgumentError(
        "%s '%s': the array is part of the graph that autograd.record() is recording; "
        "writing the result into it would change it behind autograd's back (its gradient "
        "would ignore the collective; MXNet refuses in-place assignment there too). Use the "
        "out-of-place call (hvd.allreduce, hvd.broadcast: differentiated), or call it "
        "outside autograd.record()" % (what, name))


def _check_list(tensors, what, in_place=False):
    """Checks a list of NDArrays, distinct when the call writes them (``in_place``); returns
    its length (an empty list never gets here: see :func:`_empty_group`). An out-of-place
    call may read one array twice, or views of one buffer, as Horovod does."""
    if not isinstance(tensors, (list, tuple)):
        raise InvalidArgumentError("%s expects a list of NDArrays, got %s" % (what, type(tensors).__name__))
    ndarray = mx.nd.NDArray
    for t in tensors:
        if not isinstance(t, ndarray):
            _check_ndarray(t, what)  # raises, naming the type
    if in_place and len(set(map(id, tensors))) != len(tensors):
        raise InvalidArgumentError("%s: the same NDArray appears twice in the list (in place: "
                                   "each array is written)" % what)
    return len(tensors)


def _is_empty_group(tensors):
    return isinstance(tensors, (list, tuple)) and not tensors


def _empty_group(kind, counter, name, process_set, what):
    """A grouped allreduce or reducescatter given an empty list: returns [] at once, as
    Horovod does. Its name is still taken, so an unnamed call keeps its number (the peers'
    call of the same place counts one too), and '<base>.0' is submitted as a group of 0
    tensors: where the peers passed tensors their call fails at the read ("Mismatched
    numbers of tensors in the call of allreduce 'g.0': rank 0 passed 0, rank 1 passed 2")
    instead of waiting forever for this rank's; where every rank passed an empty list the
    requests meet in one negotiation round and nothing runs."""
    pid = set_id(process_set, what)
    base = call_name(counter, name, pid)
    _core.empty_group(kind, base, pid)  # nothing if this rank is not a member of the set
    return []


# The reason an empty grouped_allgather gives the peers' layout exchange (found again there
# by _rows_of_peers, which names the ranks' lengths).
_EMPTY_ALLGATHER = "this rank passed an empty list"


def _group_size(tensors):
    """A group's length for a refusal's names (0: not a list; nothing can be named)."""
    return len(tensors) if isinstance(tensors, (list, tuple)) else 0


def _grouped(tensors, outputs, average, name, priority, prescale_factor, postscale_factor, op,
             what, process_set):
    """``outputs``: None for new arrays (returned), else ``tensors`` (in place)."""
    if _is_empty_group(tensors):
        return _empty_group("allreduce", "grouped_allreduce", name, process_set, what)
    pid = set_id(process_set, what)
    base = call_name("grouped_allreduce", name, pid)
    try:  # this rank's checks: a refusal fails the peers' call too (_refuse)
        _check_list(tensors, what, in_place=outputs is not None)
        op, pre, post, priority = _reduction(op, average, prescale_factor, postscale_factor,
                                             priority, base, what)
        if outputs is None:
            outputs = [_empty_like(t) for t in tensors]
        elif recording():  # once per call, not per tensor (0.25 ms per 1,000)
            for i, t in enumerate(tensors):
                _check_not_in_graph(t, what, "%s.%d" % (base, i))
    except Exception as e:
        refuse("allreduce", base, pid, e, _group_size(tensors))
        raise
    ins = [t.handle.value for t in tensors]
    outs = ins if outputs is tensors else [o.handle.value for o in outputs]
    _core.grouped_allreduce(ins, outs,
                            base,  # the core names tensor i '<base>.<i>'
                            op, pre, post, priority, pid, settle())
    return outputs


def grouped_allreduce(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                      postscale_factor=1.0, process_set=global_process_set, op=None):
    """:func:`allreduce` of a list of NDArrays as one engine operation (they are
    negotiated together and fused). Tensor i is named '<name>.<i>'. Returns new NDArrays.

    The list may hold one array twice, or views of one buffer (``x[0:2]``, ``x[4:6]``):
    they are only read.

    Raises:
        ValueError: not a list. An empty list returns [] at once (the peers' call of the
            same name fails if they passed tensors).
    """
    return _grouped(tensors, None, average, name, priority, prescale_factor, postscale_factor,
                    op, "grouped_allreduce", process_set)


def grouped_allreduce_(tensors, average=None, name=None, priority=0, prescale_factor=1.0,
                       postscale_factor=1.0, process_set=global_process_set, op=None):
    """In-place :func:`grouped_allreduce`; returns ``tensors``.

    Raises:
        ValueError: as :func:`grouped_allreduce`, and the same array twice or views of one
        buffer (``x[0:2]``, ``x[4:6]``) in the list: each is written; inside
        ``autograd.record()``, an array that is part of the recorded graph (as
        :func:`allreduce_`).
    """
    _grouped(tensors, tensors, average, name, priority, prescale_factor, postscale_factor, op,
             "grouped_allreduce_", process_set)
    return tensors


def broadcast_plain(tensor, output, root_rank, name, priority, process_set, what):
    """``output``: None for a new array, else ``tensor`` (in place)."""
    pid = set_id(process_set, what)
    name = call_name("broadcast", name, pid)
    try:  # this rank's checks: a refusal fails the peers' call too (_refuse)
        _check_ndarray(tensor, what)
        root_rank = _integer(root_rank, "root_rank", name)
        priority = _priority(priority, name)
        if output is None:
            output = _empty_like(tensor)
        elif recording():  # one C call per in-place call when nothing records
            _check_not_in_graph(tensor, what, name)
    except Exception as e:
        refuse("broadcast", [name], pid, e)
        raise
    _core.broadcast(_handle(tensor), _handle(output), name, root_rank, priority, pid,
                    _broadcast_wait())
    return output


def broadcast_(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """In-place :func:`broadcast`: ``tensor`` receives root_rank's values; returns it.

    Inside ``autograd.record()`` an array that is part of the recorded graph is refused
    (InvalidArgumentError), as for :func:`allreduce_`."""
    return broadcast_plain(tensor, tensor, root_rank, name, priority, process_set, "broadcast_")


_LAYOUT_DIMS = 8  # trailing dimensions sent exactly; more are folded into the last slot


def _layout(t):
    """int64 row of a tensor's layout for the exchange before an allgather: dim 0, dtype,
    ndim, then the trailing dimensions (fixed width: every rank sends the same shape)."""
    tail = list(t.shape[1:])
    if len(tail) > _LAYOUT_DIMS:  # fold the rest: equal shapes still give equal rows
        tail = tail[:_LAYOUT_DIMS - 1] + [hash(tuple(tail[_LAYOUT_DIMS - 1:])) & (2**62 - 1)]
    tail += [-1] * (_LAYOUT_DIMS - len(tail))
    rows = t.shape[0] if t.ndim else 0  # a 0-d array is refused after the exchange
    return [rows, np.dtype(t.dtype).num, t.ndim] + tail


_DTYPE_NAMES = {np.dtype(d).num: np.dtype(d).name
                for d in ("float16", "float32", "float64", "uint8", "int8", "int32", "int64",
                          "bool")}


def _describe_layout(row):
    """'float32 (N, 10, 17)' for a row of :func:`_layout` (N: dim 0, free to differ)."""
    dtype = _DTYPE_NAMES.get(int(row[1]), "dtype #%d" % row[1])
    ndim = int(row[2])
    if ndim - 1 > _LAYOUT_DIMS:  # the last slot holds a hash of the remaining dimensions
        known = [str(int(d)) for d in row[3:3 + _LAYOUT_DIMS - 1]]
        return "%s (%s, ... %d more; %d dimensions)" % (
            dtype, ", ".join(["N"] + known), ndim - _LAYOUT_DIMS, ndim)
    return "%s (%s)" % (dtype, ", ".join(["N"] + [str(int(d)) for d in row[3:3 + ndim - 1]]))


def _size_exchange_name(base, what):
    """The name of an allgather's layout exchange: the name of its first tensor ('<base>'
    for allgather, '<base>.0' for grouped_allgather; alltoall's splits exchange is
    '<base>'). The data collective of that name follows it (one name's calls run in call
    order), and a peer that made another collective under the name meets the exchange at
    the coordinator, which fails both calls at once ("Mismatched operations") instead of
    the two waiting for each other under different names (as in Horovod, whose names carry
    the collective's kind: 'allreduce.k' and 'allgather.k' never meet)."""
    return base if what == "allgather" else base + ".0"


def _rows_of_peers(tensors, base, pid, size, what, process_set):
    """Gathers every tensor's layout (:func:`_layout`) from every rank of the set and waits
    (a fixed shape, so no size exchange is needed). Returns an int64 array (size, len) of
    the ranks' dim 0. Ranks whose trailing dimensions or dtype differ raise the same
    MXNetError (an InvalidArgumentError) on every rank here, at the call, naming the
    tensor and two ranks' values, and nothing is submitted (Horovod's allgather raises at
    its call too: it waits for the result)."""
    mine = mx.nd.array([_layout(t) for t in tensors], dtype="int64")
    out = mx.nd.empty((size * len(tensors), mine.shape[1]), dtype="int64")
    try:  # the call raises too, under NaiveEngine
        _core.grouped_allgather([_handle(mine)], [_handle(out)], [_size_exchange_name(base, what)],
                                0, pid, size_exchange=True)
        table = out.asnumpy().reshape(size, len(tensors), -1)
    except mx.base.MXNetError as e:
        empty = re.search(r"failed on rank (\d+): refused at the call: .*" + _EMPTY_ALLGATHER, str(e))
        if empty:  # a peer passed [] (see grouped_allgather)
            raise InvalidArgumentError(
                "Mismatched numbers of tensors in the call of %s '%s': rank %d passed 0, rank %d "
                "passed %d (a grouped call must have the same length on every rank); nothing was "
                "submitted" % (what, base, process_set.ranks[int(empty.group(1))], topology()[0],
                               len(tensors))) from e
        if "the peers send" not in str(e):  # the core's size check: not our exchange's shape
            raise
        raise InvalidArgumentError(
            "%s '%s': the ranks passed different numbers of tensors (this rank %d); nothing "
            "was submitted" % (what, base, len(tensors))) from e
    for i in range(len(tensors)):
        tensor = base + ("" if what == "allgather" else ".%d" % i)
        scalar = [process_set.ranks[k] for k in range(size) if table[k, i, 2] == 0]
        if scalar:
            raise InvalidArgumentError(
                "%s '%s': a 0-d array has no dimension 0 to concatenate (ranks %s); nothing "
                "was submitted" % (what, tensor, scalar))
        for k in range(1, size):
            if (table[k, i, 1:] != table[0, i, 1:]).any():
                raise InvalidArgumentError(
                    "Mismatched shapes or data types for %s '%s' (all but the first dimension "
                    "must agree): rank %d has %s, rank %d has %s; nothing was submitted"
                    % (what, tensor, process_set.ranks[0], _describe_layout(table[0, i]),
                       process_set.ranks[k], _describe_layout(table[k, i])))
    return table[:, :, 0]


def grouped_allgather(tensors, name=None, priority=0, process_set=global_process_set,
                      _what="grouped_allgather"):
    """:func:`allgather` of a list of NDArrays as one engine operation (one size exchange
    for all of them). Tensor i is named '<name>.<i>'. Returns a list of new NDArrays.

    Raises:
        InvalidArgumentError: not a list (on this rank; one array twice, or views of one
            buffer, are fine: they are only read); on every rank, as for
            :func:`allgather`, and when the ranks passed different numbers of tensors. An
            empty list returns [] at once; where the peers passed tensors, their call fails
            naming this rank and both lengths.
    """
    return grouped_allgather_plain(tensors, name, priority, process_set, _what)[0]


def grouped_allgather_plain(tensors, name, priority, process_set, _what):
    """:func:`grouped_allgather`, returning (outputs, rows): rows[k, i] is the dimension 0
    of tensor i on the k-th rank of the set (None for an empty list)."""
    if _is_empty_group(tensors):
        # Its name is taken (unnamed calls keep in step with the peers') and the peers'
        # layout exchange, the first step of their call, is refused: it fails instead of
        # waiting for this rank. Where every rank passed [], the refusals meet unseen.
        pid = set_id(process_set, _what)
        base = call_name(_what, name, pid)
        refuse("allgather", [_size_exchange_name(base, _what)], pid,
                InvalidArgumentError("%s '%s': %s" % (_what, base, _EMPTY_ALLGATHER)))
        return [], None
    pid = set_id(process_set, _what)
    size = set_size(process_set, _what)
    base = call_name(_what, name, pid)
    names = [base] if _what == "allgather" else base  # the core numbers '<base>.<i>'
    try:  # this rank's checks: a refusal fails the peers' layout exchange (_refuse)
        _check_list(tensors, _what)
        priority = _priority(priority, base)
    except Exception as e:
        refuse("allgather", [_size_exchange_name(base, _what)], pid, e)
        raise
    rows = _rows_of_peers(tensors, base, pid, size, _what, process_set)
    outputs = [_empty_like(t, (int(rows[:, i].sum()),) + tuple(t.shape[1:]))
               for i, t in enumerate(tensors)]
    _core.grouped_allgather([_handle(t) for t in tensors], [_handle(o) for o in outputs], names,
                            priority, pid, settle=settle())
    return outputs, rows


def alltoall_plain(tensor, splits, name, priority, process_set):
    pid = set_id(process_set, "alltoall")
    world = set_size(process_set, "alltoall")
    name = call_name("alltoall", name, pid)
    try:  # this rank's checks: a refusal fails the peers' splits exchange (_refuse)
        send = _alltoall_splits(tensor, splits, name, world)
        priority = _priority(priority, name)
    except Exception as e:
        refuse("alltoall", [name], pid, e)
        raise
    # Each rank sends one number to each peer: how many rows it will send. Under the call's
    # own name (see _size_exchange_name): the data alltoall follows it.
    mine = mx.nd.array(send, dtype="int64")
    recv_nd = mx.nd.empty((world,), dtype="int64")
    _core.alltoall(_handle(mine), _handle(recv_nd), name, [1] * world, [1] * world, 0, pid,
                   size_exchange=True)
    recv = recv_nd.asnumpy()
    output = _empty_like(tensor, (int(recv.sum()),) + tuple(tensor.shape[1:]))
    _core.alltoall(_handle(tensor), _handle(output), name, [int(v) for v in send],
                   [int(v) for v in recv], priority, pid, settle=settle())
    if splits is not None:
        return output, mx.nd.array(recv, dtype="int32")
    return output


def _alltoall_splits(tensor, splits, name, world):
    """The rows this rank sends to each rank (int64, ``world`` entries), checked."""
    _check_ndarray(tensor, "alltoall")
    if tensor.ndim == 0:
        raise InvalidArgumentError("alltoall '%s': a 0-d array has no dimension 0 to split" % name)
    given = splits is not None
    if not given:
        if tensor.shape[0] % world:
            raise InvalidArgumentError("alltoall '%s': dimension 0 (%d) is not divisible by the number of "
                             "ranks (%d); pass splits" % (name, tensor.shape[0], world))
        send = np.full(world, tensor.shape[0] // world, dtype=np.int64)
    else:
        arr = splits.asnumpy() if isinstance(splits, mx.nd.NDArray) else np.asarray(splits)
        if arr.ndim != 1:
            raise InvalidArgumentError("alltoall '%s': splits must be 1-D, got shape %s" % (name, arr.shape))
        if arr.size != world:
            raise InvalidArgumentError("alltoall '%s': splits has %d entries for %d rank%s"
                             % (name, arr.size, world, "" if world == 1 else "s"))
        if arr.dtype.kind not in "iu":  # a float count would be rounded silently
            raise InvalidArgumentError("alltoall '%s': splits must be integers, got %s" % (name, arr.dtype))
        if (arr < 0).any():
            raise InvalidArgumentError("alltoall '%s': splits must not be negative" % name)
        if arr.sum() > tensor.shape[0]:
            raise InvalidArgumentError("alltoall '%s': splits add up to %d, more than dimension 0 (%d)"
                             % (name, arr.sum(), tensor.shape[0]))
        send = arr.astype(np.int64)
    return send


def _scatter_rows(rows, size, rank):
    """Horovod's split of dimension 0: even, the lower ranks take one extra row each while
    the remainder lasts."""
    return rows // size + (1 if rank < rows % size else 0)


def grouped_reducescatter(tensors, op=Average, name=None, priority=0,
                          process_set=global_process_set, prescale_factor=1.0,
                          postscale_factor=1.0, _what="grouped_reducescatter"):
    """:func:`reducescatter` of a list of NDArrays as one engine operation, reduced in one
    fused MPI call. Tensor i is named '<name>.<i>'. Returns a list of new NDArrays.

    Every rank passes the same number of tensors, with the same shapes and dtypes; rank r
    receives block r of dimension 0 of each, as :func:`reducescatter` describes.

    Raises:
        ValueError: as :func:`reducescatter`, for any of the tensors. An empty list
            returns [] at once (the peers' call fails if they passed tensors)."""
    single = _what == "reducescatter"
    if _is_empty_group(tensors):  # as for grouped_allreduce
        return _empty_group("reducescatter", "reducescatter", name, process_set, _what)
    pid = set_id(process_set, _what)
    size = set_size(process_set, _what)
    base = call_name("reducescatter", name, pid)
    names = [base] if single else base  # the core numbers '<base>.<i>'
    try:  # this rank's checks: a refusal fails the peers' call too (_refuse)
        _check_list(tensors, _what)
        op, pre, post, priority = _reduction(op, None, prescale_factor, postscale_factor,
                                             priority, base, _what)
        if op not in (Average, Sum):
            raise InvalidArgumentError("%s: only hvd.Sum and hvd.Average are supported, not %s"
                                       % (_what, _OP_NAMES[op]))
        for t in tensors:
            if t.ndim == 0:
                raise InvalidArgumentError("%s: a 0-d array (scalar) has no dimension 0 to scatter"
                                           % _what)
    except Exception as e:
        refuse("reducescatter", names, pid, e, _group_size(tensors))
        raise
    my_rank = [e for e in _core.process_sets() if e[0] == pid][0][3]
    outputs = [_empty_like(t, (_scatter_rows(t.shape[0], size, my_rank),) + tuple(t.shape[1:]))
               for t in tensors]
    _core.grouped_reducescatter([_handle(t) for t in tensors], [_handle(o) for o in outputs],
                                names, op, pre, post, priority, pid, settle())
    return outputs


