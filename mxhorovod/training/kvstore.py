"""kvstore 'horovod': MXNet's KVStoreBase backed by mxhorovod's allreduce and broadcast.

    import mxhorovod  # registers mx.kv.create('horovod')
    trainer = gluon.Trainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                            kvstore=mx.kv.create("horovod"))   # or kvstore="horovod"
    trainer.step(batch_size * trainer._kvstore.num_workers)   # the global batch

``pushpull`` replaces each gradient with the sum over the rank's devices and all ranks, as
every MXNet kvstore does; ``broadcast`` writes rank 0's values.
The Trainer broadcasts the parameters from rank 0 at the first ``step`` and runs the
optimizer locally on every rank (``update_on_kvstore=False``).
``step`` given the global batch size updates as one process on the concatenated batch.
MXNet drops a kvstore named by a string without 'dist' when a process has one device;
importing mxhorovod makes the name 'horovod' give this store anyway.
Refused, with an error naming the cause: the optimizer on the store
(``update_on_kvstore=True``, ``set_optimizer``, optimizer states), ``init``/``push``/``pull``,
sparse gradients or weights.
"""
import numbers

import mxnet as mx
import numpy as np

import mxhorovod._core as _core
from mxhorovod.common.basics import init, is_initialized, local_rank, rank, size
from mxhorovod.collectives.ops import Sum, allreduce, allreduce_, broadcast, broadcast_
from mxhorovod.common.naming import next_number

__all__ = ["Horovod"]


def _as_list(x):
    return list(x) if isinstance(x, (list, tuple)) else [x]


def _key_text(key, what):
    if isinstance(key, str):
        return key
    if isinstance(key, numbers.Integral) and not isinstance(key, bool):
        return "#%d" % int(key)
    raise TypeError("kvstore 'horovod' %s: a key must be an int or a str, got %r (%s)"
                    % (what, key, type(key).__name__))


def _check_arrays(arrays, key, role, what):
    """arrays: a non-empty list of NDArrays of one shape and dtype."""
    if not arrays:
        raise ValueError("kvstore 'horovod' %s(%r): %s is an empty list" % (what, key, role))
    for a in arrays:
        if not isinstance(a, mx.nd.NDArray):
            raise TypeError("kvstore 'horovod' %s(%r): %s must be NDArrays, got %s"
                            % (what, key, role, type(a).__name__))
        if a.stype != "default":
            raise ValueError("kvstore 'horovod' %s(%r): %s has storage %s; only dense "
                             "(default) arrays are supported" % (what, key, role, a.stype))
    first = arrays[0]
    for a in arrays[1:]:
        if a.shape != first.shape or a.dtype != first.dtype:
            raise ValueError("kvstore 'horovod' %s(%r): the %s arrays of the devices differ: "
                             "shape %s dtype %s vs shape %s dtype %s"
                             % (what, key, role, first.shape, np.dtype(first.dtype).name,
                                a.shape, np.dtype(a.dtype).name))


def _entries(key, value, out, what):
    """[(key, [values], [outs] or None)] for one key or a list of keys, every entry checked
    (before any collective is issued, so bad input never leaves half a list in flight)."""
    entries = _split(key, value, out, what)
    for k, values, outs in entries:
        _key_text(k, what)
        _check_arrays(values, k, "value", what)
        if outs is not None:
            _check_arrays(outs, k, "out", what)
            if (outs[0].shape, outs[0].dtype) != (values[0].shape, values[0].dtype):
                raise ValueError("kvstore 'horovod' %s(%r): out has shape %s dtype %s, value "
                                 "shape %s dtype %s" % (what, k, outs[0].shape,
                                                        np.dtype(outs[0].dtype).name,
                                                        values[0].shape,
                                                        np.dtype(values[0].dtype).name))
    return entries


def _split(key, value, out, what):
    if isinstance(key, (list, tuple)):
        values = _as_list(value)
        if len(values) != len(key):
            raise ValueError("kvstore 'horovod' %s: %d keys but %d values"
                             % (what, len(key), len(values)))
        if out is None:
            outs = [None] * len(key)
        else:
            outs = _as_list(out)
            if len(outs) != len(key):
                raise ValueError("kvstore 'horovod' %s: %d keys but %d outs"
                                 % (what, len(key), len(outs)))
        return [(k, _as_list(v), None if o is None else _as_list(o))
                for k, v, o in zip(key, values, outs)]
    return [(key, _as_list(value), None if out is None else _as_list(out))]


class Horovod(mx.kvstore.KVStoreBase):
    """KVStore of type 'horovod': ``pushpull`` sums over all ranks by allreduce,
    ``broadcast`` sends rank 0's value; no servers, no optimizer on the store.

    Created by ``mx.kv.create('horovod')`` (or by a Trainer given ``kvstore='horovod'``);
    creating it calls ``hvd.init()`` if that has not happened yet (ValueError when a
    peer has already ended the job). Every rank must make the same calls with the same
    keys in the same order: keys name the collectives.
    """

    def __init__(self):
        if not is_initialized():
            reason = _core.stop_reason()
            if reason:  # a peer ended the job: starting again would wait for it forever
                raise ValueError("kvstore 'horovod': mxhorovod has stopped (%s); cannot create "
                                 "a kvstore in a job that has ended" % reason)
            init()
        self._prefix = None  # numbered at the first collective (_name)

    def _name(self, what, key):
        if self._prefix is None:
            # Numbered in the order kvstores first communicate (mxhorovod.common.naming), not in
            # creation order: one made on some ranks only, or never used, must not shift the
            # names of the others; two kvstores in one process (two Trainers) never share one.
            self._prefix = "kvstore.%d." % next_number("kvstore", 0)
        return "%s%s.%s" % (self._prefix, what, _key_text(key, what))

    @property
    def type(self):
        """'horovod' (no 'dist' in it: MXNet then updates locally; see the module doc)."""
        return "horovod"

    @property
    def rank(self):
        """This process's rank, 0 <= rank < num_workers (``hvd.rank()``)."""
        return rank()

    @property
    def local_rank(self):
        """Rank among the processes on this host (``hvd.local_rank()``)."""
        return local_rank()

    @property
    def num_workers(self):
        """Number of processes in the job (``hvd.size()``)."""
        return size()

    def broadcast(self, key, value, out, priority=0):
        """Write rank 0's ``value`` into every array of ``out`` on every rank.

        Args:
            key: int or str, or a list of them (then ``value`` and ``out`` are lists
                with one entry per key).
            value: NDArray, same shape and dtype on every rank (only rank 0's values
                are used); left unchanged unless it is also in ``out``.
            out: NDArray or list of NDArrays (one per device) of value's shape.
            priority: accepted for MXNet's KVStore signature; orders nothing (see
                :func:`mxhorovod.allreduce`).
        Raises:
            TypeError: a key that is not an int or str, or a value that is not an NDArray.
            ValueError: lists of different lengths, or an out of another shape or dtype.
            Nothing is sent when any entry of a list is bad.
        """
        entries = _entries(key, value, out, "broadcast")
        for k, values, outs in entries:
            if len(values) != 1:
                raise ValueError("kvstore 'horovod' broadcast(%r): value must be one NDArray, "
                                 "got a list of %d" % (k, len(values)))
            if outs is None:
                raise ValueError("kvstore 'horovod' broadcast(%r): out is required" % (k,))
        for k, values, outs in entries:
            src, name = values[0], self._name("broadcast", k)
            if any(o is src for o in outs):
                broadcast_(src, root_rank=0, name=name, priority=priority)
                result = src
            else:
                result = broadcast(src, root_rank=0, name=name, priority=priority)
            for o in outs:
                if o is not result:
                    result.copyto(o)

    def pushpull(self, key, value, out=None, priority=0):
        """Sum ``value`` over the devices of this rank and over all ranks, into ``out``
        (or, without ``out``, into every array of ``value``).

        Args:
            key: int or str, or a list of them (then ``value`` and ``out`` are lists
                with one entry per key).
            value: NDArray, or a list of NDArrays of one shape and dtype (one per device);
                the same shape and dtype on every rank. Unchanged when ``out`` is given.
            out: None, an NDArray or a list of NDArrays of value's shape.
            priority: accepted for MXNet's KVStore signature; orders nothing (see
                :func:`mxhorovod.allreduce`).
        Returns:
            None; the results are ready when read.
        Raises:
            TypeError, ValueError: as for :meth:`broadcast`; a dtype or storage the
            allreduce refuses (see ``hvd.allreduce``). Ranks that disagree on shape or
            dtype get an MXNetError naming the key's collective at the next read.
        """
        for k, values, outs in _entries(key, value, out, "pushpull"):
            name = self._name("pushpull", k)
            if len(values) == 1 and (outs is None or (len(outs) == 1 and outs[0] is values[0])):
                allreduce_(values[0], name=name, priority=priority, op=Sum)
                continue
            if len(values) == 1:
                total = allreduce(values[0], name=name, priority=priority, op=Sum)
            else:
                # Devices of this rank first (as MXNet's local kvstores do), then the ranks.
                ctx = values[0].context
                total = values[0].copy()
                for v in values[1:]:
                    total += v.as_in_context(ctx)
                allreduce_(total, name=name, priority=priority, op=Sum)
            for target in (values if outs is None else outs):
                total.copyto(target)

    @staticmethod
    def is_capable(capability):
        """False for 'optimizer' (the Trainer updates on every rank); ValueError for
        anything else, as MXNet's own stores answer."""
        if capability.lower() == mx.kvstore.KVStoreBase.OPTIMIZER:
            return False
        raise ValueError("Unknown capability: {}".format(capability))

    def set_optimizer(self, optimizer):
        raise NotImplementedError(
            "kvstore 'horovod' does not run the optimizer: create the gluon.Trainer with "
            "update_on_kvstore=None or False, so every rank updates after pushpull")

    def save_optimizer_states(self, fname, dump_optimizer=False):
        raise NotImplementedError(
            "kvstore 'horovod' holds no optimizer states: use trainer.save_states (on rank 0)")

    def load_optimizer_states(self, fname):
        raise NotImplementedError(
            "kvstore 'horovod' holds no optimizer states: use trainer.load_states")

    def init(self, *args, **kwargs):
        """Not supported: raises NotImplementedError (so do push, pull, row_sparse_pull)."""
        raise NotImplementedError(
            "kvstore 'horovod' stores no values (init/push/pull): it serves gluon.Trainer "
            "through broadcast and pushpull. With the Module API pass kvstore=None and wrap "
            "the optimizer in hvd.DistributedOptimizer (see docs/module.md)")

    push = pull = row_sparse_pull = init
