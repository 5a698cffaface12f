"""Collective helpers built on the core ops: broadcast model state and Python objects.

``broadcast_parameters`` makes every rank start from the root rank's weights (Gluon
ParameterDict, or Module's ``arg_params``/``aux_params`` dicts); ``broadcast_object`` and
``allgather_object`` move any picklable Python object (epoch number, optimizer states,
metrics) between ranks. All are collective: every rank must call them, in the same order.
"""
import hashlib
import pickle

import cloudpickle

import mxnet as mx
import numpy as np
from mxnet.gluon.parameter import Parameter, ParameterDict

from mxhorovod.collectives import deferred_init
from mxhorovod.collectives.ops import allgather, broadcast_
from mxhorovod.common.basics import rank, size
from mxhorovod.common.naming import next_number
from mxhorovod.common.process_sets import global_process_set, set_id

__all__ = ["broadcast_parameters", "broadcast_object", "allgather_object"]

def _auto_name(kind, name, process_set=global_process_set):
    """``name``, or '<kind>.<n>' numbered per kind and process set in call order (the same
    script calls these helpers in the same order on every rank of the set, so the names
    match, and two calls never share a name in flight; see :mod:`mxhorovod.common.naming`)."""
    if name is not None:
        return str(name)
    return "%s.%d" % (kind, next_number(kind, set_id(process_set, kind)))


def broadcast_arrays(arrays, root_rank, name):
    """Broadcast arrays[0] in place and copy it to the other contexts' copies."""
    first = arrays[0]
    # Resolve MXNet's MKLDNN layout before the op is queued (DESIGN.md, known traps):
    # a weight left in MKLDNN layout by an inference-mode forward hangs inside the op.
    first.wait_to_read()
    broadcast_(first, root_rank, name=name)
    for other in arrays[1:]:
        first.copyto(other)


def _words(n):
    """How many int64 words hold ``n`` bits."""
    return -(-n // 64)


def _check_same_keys(keys, deferred, prefix):
    """Raises ValueError on every rank unless every rank passed the same keys; else returns,
    for each key, whether its parameter is deferred (``deferred``: this rank's flags) on
    some rank.

    The broadcasts are named by key: a key that some ranks lack leaves the others waiting
    for it forever (the stall warning every minute was the only sign). The usual cause:
    Gluon names blocks from per-process counters (dense0_, dense1_, ...), so a block made
    on some ranks only before the net (a rank-0 helper) shifts the net's names there. One
    small allgather (a digest of the keys and the deferred flags as bits); the lists
    themselves only when they differ."""
    digest = hashlib.blake2b("\0".join(keys).encode("utf-8", "surrogatepass"),
                             digest_size=8).digest()
    bits = np.zeros(_words(len(keys)) * 8, dtype=np.uint8)
    packed = np.packbits(np.asarray(deferred, dtype=bool))
    bits[:len(packed)] = packed
    mine = np.concatenate([[int.from_bytes(digest, "little", signed=True), len(keys)],
                           bits.view(np.int64)]).astype(np.int64)
    got = allgather(mx.nd.array(mine, dtype=np.int64), name=prefix + "keys").asnumpy()
    rows, at = [], 0
    while at < len(got):  # each rank's row: digest, number of keys, that many bits
        end = at + 2 + _words(int(got[at + 1]))
        rows.append(got[at:end])
        at = end
    if all(len(row) == len(mine) and (row[:2] == mine[:2]).all() for row in rows):
        anywhere = np.bitwise_or.reduce(np.stack(rows)[:, 2:], axis=0)
        return np.unpackbits(anywhere.view(np.uint8))[:len(keys)].astype(bool).tolist()
    lists = allgather_object(keys, name=prefix + "key_lists")
    first = set(lists[0])
    parts = []
    for r, other in enumerate(lists[1:], start=1):
        extra, missing = sorted(set(other) - first), sorted(first - set(other))
        if not extra and not missing:
            continue

        def names(ks):
            shown = ", ".join("'%s'" % k for k in ks[:4])
            return shown + (", ... (%d in all)" % len(ks) if len(ks) > 4 else "")
        parts.append("rank %d%s%s" % (
            r, " has %s that rank 0 has not" % names(extra) if extra else "",
            "%s lacks %s" % (" and" if extra else "", names(missing)) if missing else ""))
    raise ValueError(
        "broadcast_parameters: the ranks passed different parameter names (every rank must "
        "pass the same keys): %s. Gluon names blocks from per-process counters (dense0_, "
        "dense1_, ...): a block made on some ranks only before this net shifts its names "
        "there; give the net a prefix (prefix='net_') or make the same blocks on every "
        "rank" % "; ".join(parts))


def broadcast_parameters(params, root_rank=0, prefix=None):
    """Overwrite ``params`` on every rank with their values on ``root_rank``, in place.

    Args:
        params: a ``gluon.ParameterDict`` (``net.collect_params()``) or a dict of name to
            ``Parameter`` or to ``NDArray`` (Module's ``arg_params`` / ``aux_params``).
            Keys are visited in sorted order, so insertion order may differ between ranks.
            Parameters whose initialization is deferred are broadcast right after their
            initialization, during the first forward pass. Under MXNet's NaiveEngine
            (``MXNET_ENGINE_TYPE=NaiveEngine``), which completes every collective inside
            its call, a parameter deferred on some rank is broadcast during the first
            forward on every rank: where it is initialized (rank 0 loaded a checkpoint) it
            is made deferred again, keeping its arrays and values, so reading it there
            raises ``DeferredInitializationError`` until that forward, as on the other
            ranks (with the threaded engines it is broadcast at the call there).
        root_rank: rank whose values win.
        prefix: prefix of the collective names (default: an automatic per-call prefix);
            the name of each tensor is ``prefix + key``.

    Returns None; the broadcasts are asynchronous (reading a parameter waits for them),
    after one small blocking allgather that checks that every rank passed the same keys
    (and tells which parameters are deferred on some rank). Under NaiveEngine each
    broadcast completes inside its call: at the call, or in the first forward.

    Raises:
        ValueError: ``params`` is not a dict or ParameterDict, or holds a Gluon
            Parameter of storage type row_sparse (only dense Parameters; a row_sparse
            NDArray, Module's ``arg_params`` of a ``stype='row_sparse'`` variable, is
            broadcast through its dense form), or a csr array; and on every rank, before
            anything is broadcast, when the ranks' keys differ (naming them; Horovod waits
            forever for the missing names), for instance Gluon's automatic names shifted by
            a block made on some ranks only.
        RuntimeError: a Parameter was never initialized (call ``initialize()`` first).
    """
    if not isinstance(params, (dict, ParameterDict)):
        raise ValueError("broadcast_parameters takes a dict or ParameterDict, got %s"
                         % type(params).__name__)
    if prefix is not None and not isinstance(prefix, str):
        raise ValueError("prefix must be a str or None, got %r" % (prefix,))
    if prefix is None:
        prefix = _auto_name("broadcast_parameters", None) + "."
    if size() == 1:
        return
    items = sorted(params.items(), key=lambda kv: str(kv[0]))
    deferred = [isinstance(v, Parameter) and deferred_init.is_deferred(v) for _, v in items]
    anywhere = _check_same_keys([str(k) for k, _ in items], deferred, prefix)
    in_order = deferred_init.synchronous_engine()
    for (key, value), here, somewhere in zip(items, deferred, anywhere):
        name = prefix + str(key)
        if isinstance(value, Parameter):
            if value._stype != "default":
                raise ValueError("broadcast_parameters: parameter %r has storage type %s; "
                                 "only dense parameters are supported" % (key, value._stype))
            if not here:
                arrays = value.list_data()  # RuntimeError if never initialized
            if here or (somewhere and in_order):  # broadcast in the first forward
                if not here:  # initialized here, deferred on another rank: deferred_init
                    deferred_init.defer_again(value)
                deferred_init.broadcast_when_initialized(
                    value, lambda arrays, name=name: broadcast_arrays(arrays, root_rank, name))
                continue
        elif isinstance(value, mx.nd.NDArray):
            if value.stype == "row_sparse":
                # Module's arg_params for mx.sym.Variable(..., stype='row_sparse'): the
                # core takes dense arrays only; the root's rows come back as row_sparse
                # (rows of zeros dropped, the same value). Engine-ordered, no wait.
                dense = value.tostype("default")
                broadcast_arrays([dense], root_rank, name)
                dense.tostype("row_sparse").copyto(value)
                continue
            if value.stype != "default":
                raise ValueError("broadcast_parameters: %r has storage type %s; only dense "
                                 "and row_sparse arrays are supported" % (key, value.stype))
            arrays = [value]
        else:
            raise ValueError("broadcast_parameters: %r is a %s, expected a Parameter or "
                             "NDArray" % (key, type(value).__name__))
        broadcast_arrays(arrays, root_rank, name)


# The most bytes of one collective of a pickled object. MXNet (built without
# USE_INT64_TENSOR_SIZE, as the PyPI wheels) cannot make an array of 2**31 - 1 elements or
# more, and MPI counts are ints: a larger pickle goes in several collectives. A gather's
# output holds every rank's piece, so each rank sends at most this / size() per round.
_CHUNK_BYTES = 1 << 30


def _pickle(obj):
    """(the pickled ``obj`` as bytes, None), or (None, the error) if it cannot be pickled.
    cloudpickle, as Horovod: lambdas, closures and local classes go too."""
    try:
        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL), None
    except Exception as e:  # pickling runs arbitrary __reduce__ code: any error
        return None, e


def _piece(data, start, stop):
    """uint8 NDArray of data[start:stop] (stop - start may be 0)."""
    if stop <= start:
        return mx.nd.empty((0,), dtype=np.uint8)
    return mx.nd.array(np.frombuffer(data, dtype=np.uint8, count=stop - start, offset=start),
                       dtype=np.uint8)


def _data_name(name, k):
    return name + ".data" + (".%d" % k if k else "")


def broadcast_object(obj, root_rank=0, name=None, process_set=global_process_set):
    """Return ``root_rank``'s ``obj`` on every rank (pickled with cloudpickle, sent as uint8).

    Args:
        obj: any object cloudpickle can pickle, on the root rank; ignored on the others.
        root_rank: rank whose object is returned: a job rank (``hvd.rank()``), a member of
            ``process_set`` (as Horovod).
        name: base name of the collectives (default: an automatic per-call name).
        process_set: the ranks taking part (default: all).

    Returns the root's object (the root gets back its own ``obj``, not a copy).
    Blocks until the object has arrived. A pickle of 1 GiB or more goes in several
    broadcasts of at most 1 GiB (MXNet's arrays hold fewer than 2**31 elements).

    Raises:
        ValueError: on every rank, when the root could not pickle ``obj`` (the root's
            error is chained there; the other ranks' message names the root and the
            error), so no rank waits for data that never comes.
    """
    name = _auto_name("broadcast_object", name, process_set)
    me = rank()
    data, error = _pickle(obj) if me == root_rank else (None, None)
    # The root sends the payload's size, or -1 when it could not pickle; the others 0.
    length = mx.nd.array([-1 if error else len(data) if data is not None else 0],
                         dtype=np.int64)
    broadcast_(length, root_rank, name=name + ".size", process_set=process_set)
    n = int(length.asscalar())
    if n < 0:
        raise ValueError("broadcast_object '%s': rank %d could not pickle the object%s"
                         % (name, root_rank, ": %r" % (error,) if error else "")) from error
    received = None if me == root_rank else bytearray(n)
    for k, start in enumerate(range(0, n, _CHUNK_BYTES)):
        stop = min(n, start + _CHUNK_BYTES)
        piece = _piece(data, start, stop) if me == root_rank \
            else mx.nd.empty((stop - start,), dtype=np.uint8)
        broadcast_(piece, root_rank, name=_data_name(name, k), process_set=process_set)
        if me == root_rank:
            piece.wait_to_read()
        else:
            received[start:stop] = piece.asnumpy().data
        del piece
    if me == root_rank:
        return obj
    return pickle.loads(received)


def allgather_object(obj, name=None, process_set=global_process_set):
    """Return the list ``[obj of rank 0, obj of rank 1, ...]`` on every rank.

    Args:
        obj: any object cloudpickle can pickle (objects may differ in type and size
            between ranks).
        name: base name of the collectives (default: an automatic per-call name).
        process_set: the ranks taking part (default: all).

    Returns a list of length ``size()`` (of the set), in rank order. Blocks until all have
    arrived. Pickles of 1 GiB / size() or more go in several allgathers, each rank sending
    at most that much in each (MXNet's arrays hold fewer than 2**31 elements).

    Raises:
        ValueError: on every rank, when some rank could not pickle its object (naming
            those job ranks; the local error is chained where it happened).
    """
    name = _auto_name("allgather_object", name, process_set)
    data, error = _pickle(obj)
    length = mx.nd.array([len(data) if data is not None else -1], dtype=np.int64)
    lengths = allgather(length, name=name + ".size", process_set=process_set).asnumpy().tolist()
    failed = [k for k, n in enumerate(lengths) if n < 0]  # positions in the set
    if failed:
        raise ValueError("allgather_object '%s': ranks %s could not pickle their objects%s"
                         % (name, [process_set.ranks[k] for k in failed],
                            ": %r" % (error,) if error else "")) from error
    per = max(1, _CHUNK_BYTES // len(lengths))
    rounds = max(1, max(-(-n // per) for n in lengths))
    received = [bytearray(n) for n in lengths]
    for k in range(rounds):
        mine = _piece(data, min(len(data), k * per), min(len(data), (k + 1) * per))
        gathered = allgather(mine, name=_data_name(name, k), process_set=process_set).asnumpy()
        del mine
        at = 0
        for q, n in enumerate(lengths):
            start, stop = min(n, k * per), min(n, (k + 1) * per)
            received[q][start:stop] = gathered[at:at + stop - start].data
            at += stop - start
        del gathered
    return [pickle.loads(b) for b in received]
