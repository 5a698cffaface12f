"""SyncBatchNorm: gluon.nn.BatchNorm over the whole batch of every rank of a process set.

The layer is an MXNet Python custom operator (``mx.operator.CustomOp``): MXNet runs its
forward and backward on its own pool of threads for custom operators, not on an engine
worker, and each call only pushes work whose results the outputs depend on: the
extension's engine operations for the local arithmetic (``_core.sync_bn``,
src/mxnet/sync_bn_op.h: they take no shared resource of the engine, so a layer's way to its
collective never waits behind another layer's) and its asynchronous allreduce. It never
waits for the peers. MXNet completes the operator once every array handed to the call has
been written (docs/design.md, "SyncBatchNorm"). Collectives are named per layer and
direction, never by order:

- forward: ``SyncBatchNorm.<layer>.forward`` (one grouped allreduce of two tensors:
  ``.0`` a per-channel array in the input's dtype, whose shape and dtype the peers must
  share, and ``.1`` the count, sum and sum of squares, in float64). The forwards of one layer run one
  after the other (each writes the running statistics), so one name serves them all.
- backward: ``SyncBatchNorm.<layer>.backward.<slot>``, where ``slot`` is the smallest
  number no earlier recorded forward of the layer still holds (its backward releases it):
  0 in a usual training loop, so the names repeat every step (the response cache keeps
  them), and distinct for forwards whose backwards may run at the same time (a layer used
  twice in one graph). Every rank computes the same slots: a forward of the layer starts
  only after every backward pushed before it has ended (the backward reads the running
  statistics that the forward writes), and before any pushed after it.
"""
import threading

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod._core as _core
from mxhorovod.collectives.submit import (MKLDNN, Sum, allreduce_, gradient_reduction,
                                          grouped_allreduce_)
from mxhorovod.common.errors import InvalidArgumentError
from mxhorovod.common.state import not_initialized
from mxhorovod.common.process_sets import (ProcessSet, global_process_set, set_id, set_size,
                                           unpickle_set)

__all__ = ["SyncBatchNorm"]

OP_TYPE = "mxhorovod_SyncBatchNorm"


class SyncBatchNorm(gluon.nn.BatchNorm):
    """``gluon.nn.BatchNorm`` whose training statistics are those of the whole batch: the
    concatenation of the batches of every rank of ``process_set``.

    A drop-in for ``gluon.nn.BatchNorm`` (same arguments, parameters and parameter names,
    ``isinstance(layer, gluon.nn.BatchNorm)``), and for GluonCV's ``norm_layer``
    (``resnet50_v1b(norm_layer=hvd.SyncBatchNorm)``; ``norm_kwargs={'num_devices': n}``
    is accepted and ignored). Works in hybridized networks, also with
    ``hybridize(static_alloc=True, static_shape=True)``. Every rank of the set must build
    the layer the same way, so that its name (``self.name``, which names its collectives)
    is the same on every rank.

    It takes ``gluon.nn.BatchNorm``'s arguments, with the same meanings and defaults
    (``axis=1``, ``momentum=0.9``, ``epsilon=1e-5``, ``center``, ``scale``,
    ``use_global_stats``, the four initializers, ``in_channels``, ``prefix``, ``params``),
    and:

    Args:
        num_devices: ignored (GluonCV's ``SyncBatchNorm`` argument: devices of one process;
            here the ranks of ``process_set`` take part).
        process_set: the ranks whose batches are normalized together (default: all). Every
            rank of the set runs the layer's training passes in the same order.

    Shapes and dtypes: the input has any shape with ``axis`` as its channel axis
    (``(N, C)``, ``(N, C, H, W)``, ...); the batch size and the other dimensions but the
    channels may differ between ranks. float32 or float16 (float64 too); with float16
    input the parameters and running statistics stay float32 (as ``gluon.nn.BatchNorm``
    after ``cast('float16')``) and the statistics are accumulated in float32. The output
    has the input's shape and dtype.

    Training (inside ``autograd.record()``, or ``train_mode()``) without
    ``use_global_stats``: every rank normalizes its input with the mean and the biased
    variance of the whole batch, exactly as one process running ``gluon.nn.BatchNorm`` on
    the concatenated batch would, and receives the same running statistics
    (``running = momentum * running + (1 - momentum) * batch statistic``, biased
    variance). One grouped allreduce per layer in forward, one allreduce in backward.
    Backward gives each rank's input the gradient of the whole-batch normalization, and
    ``gamma``/``beta`` each rank's part of their gradient (the sum over its own samples):
    their sum over the ranks is the gradient of one process on the concatenated batch, as
    in Horovod's PyTorch SyncBatchNorm. With ``DistributedTrainer`` (which averages every
    gradient over the ranks) the update is therefore that of one process whose loss is the
    sum over the whole batch divided by the number of ranks: ``trainer.step(B / n)`` with
    ``B`` the whole batch's size and ``n`` the number of ranks (the per-rank batch size
    when the ranks have equal batches, as usual) updates exactly as one process does with
    ``step(B)``.

    Difference from ``gluon.nn.BatchNorm``: MXNet's BatchNorm updates the running
    statistics in its backward pass; this layer updates them in its training forward
    pass (MXNet's engine does not order a custom operator's backward before later readers
    of the statistics). For a layer called once per step, after a forward and its
    backward they are the same; a training forward that is never differentiated updates
    them here and not in BatchNorm.

    Inference (``autograd.predict_mode()``, or a call outside ``record()``) and
    ``use_global_stats=True``: the running statistics normalize, as in BatchNorm, and the
    layer makes no collective: any rank may evaluate alone.

    Errors (raised by ``asnumpy()``/``wait_to_read()`` of the output, or any later read
    that depends on it, on every rank of the set; never a hang): ranks with different
    channel counts ("Mismatched shapes for allreduce 'SyncBatchNorm.<layer>.forward.0':
    rank 0 has (8,), rank 1 has (4,)": the shape is ``(channels,)``) or different input dtypes
    ("Mismatched data types ...: rank 0 has float32, rank 1 has float16"), as
    ``mxnet.base.MXNetError``. A rank outside ``process_set`` that runs the layer in training
    raises :class:`InvalidArgumentError` at the call (in a hybridized network: at its first
    call; a later one fails in MXNet's custom operator, the reason printed).
    """

    def __init__(self, axis=1, momentum=0.9, epsilon=1e-5, center=True, scale=True,
                 use_global_stats=False, beta_initializer='zeros', gamma_initializer='ones',
                 running_mean_initializer='zeros', running_variance_initializer='ones',
                 in_channels=0, num_devices=None, process_set=global_process_set, **kwargs):
        super(SyncBatchNorm, self).__init__(
            axis=axis, momentum=momentum, epsilon=epsilon, center=center, scale=scale,
            use_global_stats=use_global_stats, beta_initializer=beta_initializer,
            gamma_initializer=gamma_initializer,
            running_mean_initializer=running_mean_initializer,
            running_variance_initializer=running_variance_initializer,
            in_channels=in_channels, **kwargs)
        if process_set is None:
            process_set = global_process_set
        if not isinstance(process_set, ProcessSet):
            raise TypeError("SyncBatchNorm: process_set must be an hvd.ProcessSet, not %s"
                            % type(process_set).__name__)
        self._process_set = process_set
        self._num_devices = num_devices

    def _what(self):
        return "SyncBatchNorm '%s'" % self.name

    def _check_member(self):
        """Training before init() or on a rank outside the set: an error at the call."""
        if self._kwargs["use_global_stats"] or not autograd.is_training():
            return
        if not _core.is_initialized():
            raise ValueError(not_initialized(self._what()))
        pid = set_id(self._process_set, self._what())
        if pid != 0 and self._process_set.included() is False:
            raise InvalidArgumentError(
                "%s: this rank (%d) is not in its process set (ranks %s): it cannot take part "
                "in the set's batch statistics (evaluate in autograd.predict_mode(), or "
                "give the layer a set holding this rank)"
                % (self._what(), _core.topology()[0], self._process_set.ranks))

    def forward(self, x, *args):
        if isinstance(x, mx.nd.NDArray):
            self._check_member()  # before a deferred initialization would wrap the error
        return super(SyncBatchNorm, self).forward(x, *args)

    def hybrid_forward(self, F, x, gamma, beta, running_mean, running_var):
        if F is mx.sym:
            self._check_member()  # hybridized: when the graph is built
        ps = self._process_set
        ranks = "global" if ps is global_process_set else ",".join(map(str, ps.ranks or ()))
        k = self._kwargs
        plain = MKLDNN
        if plain:
            x = _plain_layout(F, x, k["axis"])
        y = F.Custom(x, gamma, beta, running_mean, running_var, op_type=OP_TYPE,
                     name="fwd", layer=self.name, axis=k["axis"], eps=k["eps"],
                     momentum=k["momentum"], fix_gamma=k["fix_gamma"],
                     use_global_stats=k["use_global_stats"], process_set=ranks)
        return _plain_layout(F, y, k["axis"]) if plain else y

    def __repr__(self):
        return super(SyncBatchNorm, self).__repr__()[:-1] + ", process_set=%s)" % (
            "global" if self._process_set is global_process_set else self._process_set.ranks)


def _plain_layout(F, x, axis):
    """``x`` (and, in backward, its gradient) as a fresh array in the plain layout.

    MXNet 1.9.1's MKLDNN kernels (Convolution, Pooling, Activation, ...) keep their outputs
    and their input gradients in MKLDNN's blocked layout, and a custom operator is handed
    such an array as plain memory: read, or written to, in the wrong order (outputs, and
    gradients of the layers around it, came out scrambled or NaN, run to run). An operator
    without an MKLDNN kernel, here a multiplication by ones, makes the engine reorder its
    input to the plain layout and makes a plain output, in both directions. The ones: one
    slice along the channel axis, so that they take the input's dtype."""
    ones = F.BlockGrad(F.ones_like(F.slice_axis(x, axis=axis, begin=0, end=1)))
    return F.broadcast_mul(x, ones)


def _bool(text):
    return text in (True, "True", "true", "1")


class _Slots(object):
    """The backward slots of one layer (see the module's docstring)."""

    def __init__(self):
        self.held = set()
        self.lock = threading.Lock()

    def take(self):
        with self.lock:
            s = 0
            while s in self.held:
                s += 1
            self.held.add(s)
            return s

    def release(self, s):
        with self.lock:
            self.held.discard(s)


# (layer name, process set) -> its _Slots, for the life of the process (every rank of the
# set keeps the same history, so the same slots).
_slots = {}
_slots_lock = threading.Lock()


def _process_set_of(text):
    return global_process_set if text == "global" else unpickle_set(
        [int(r) for r in text.split(",") if r])


class _SyncBatchNormOp(mx.operator.CustomOp):
    """One pass of the layer (MXNet makes one per call; a graph hybridized with
    ``static_shape=True`` reuses one)."""

    def __init__(self, prop, recording):
        super(_SyncBatchNormOp, self).__init__()
        self.p = prop
        self.recording = recording  # created inside autograd.record(): a backward may come
        self.forwards = 0
        self.slot = None  # the backward slot of the last forward, until its backward
        self.batch_stats = False  # the last forward normalized with the batch's statistics
        self.alone = False  # ... of a set of one rank: no collective
        self.stats = self.mean = self.var = None  # the last forward's statistics

    def _slot_table(self):
        key = (self.p.layer, self.p.process_set)
        with _slots_lock:
            return _slots.setdefault(key, _Slots())

    def forward(self, is_train, req, in_data, out_data, aux):
        p = self.p
        x, gamma, beta = in_data
        moving_mean, moving_var = aux
        axis = p.axis(x)
        c = x.shape[axis]
        self.batch_stats = bool(is_train) and not p.use_global_stats
        table = self._slot_table()
        if self.slot is not None:  # a reused pass (static_shape): its backward is done
            table.release(self.slot)
            self.slot = None
        out = out_data[0]
        out_req = _REQ[req[0]]
        if out_req == _NULL:  # nothing asked of the output: the statistics still count
            out, out_req = mx.nd.empty(x.shape, dtype=x.dtype), _WRITE
        arrays = dict(x=x, gamma=gamma, beta=beta, mean=moving_mean, var=moving_var, out=out)
        if not self.batch_stats:
            self.mean, self.var = moving_mean, moving_var
            _push(_FORWARD, arrays, p, axis, out_req=out_req, batch_stats=False)
            self.forwards += 1
            return
        ps = _process_set_of(p.process_set)
        what = "SyncBatchNorm '%s'" % p.layer
        pid = set_id(ps, what)
        if pid != 0 and ps.included() is False:
            raise InvalidArgumentError("%s: this rank is not in its process set (ranks %s)"
                                       % (what, ps.ranks))
        # count, n * mean and M2 + n * mean^2 per channel (float64, M2 from a second pass):
        # summed over the ranks, the count, sum and sum of squares.
        stats = mx.nd.empty((1 + 2 * c,), dtype="float64")
        _push(_STATS, dict(x=x, stats=stats), p, axis)
        self.alone = set_size(ps, what) == 1
        if not self.alone:
            if self.recording or self.forwards:  # a backward may come
                self.slot = table.take()
            # The input's channels and dtype, which the core checks against the peers'.
            shape_and_dtype = mx.nd.zeros((c,), dtype=x.dtype)
            with gradient_reduction():  # never wait here for the arrays' layout
                grouped_allreduce_([shape_and_dtype, stats], op=Sum, process_set=ps,
                                   name="SyncBatchNorm.%s.forward" % p.layer)
        acc = gamma.dtype  # float32 for float16 input (gluon keeps the parameters float32)
        self.mean = mx.nd.empty((c,), dtype=acc)
        self.var = mx.nd.empty((c,), dtype=acc)
        self.stats = stats
        arrays.update(stats=stats, saved_mean=self.mean, saved_var=self.var)
        _push(_FORWARD, arrays, p, axis, out_req=out_req, batch_stats=True)
        self.forwards += 1

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        p = self.p
        x, gamma, _ = in_data
        axis = p.axis(x)
        c = x.shape[axis]
        # The statistics of the forward (the running ones at this backward, as BatchNorm).
        mean, var = (self.mean, self.var) if self.batch_stats else aux
        sums = mx.nd.empty((2 * c,), dtype="float64")
        arrays = dict(x=x, dy=out_grad[0], mean=mean, var=var, grad_sums=sums)
        # gamma and beta: this rank's part (the trainer's allreduce adds the ranks' parts).
        gamma_req, beta_req = _REQ[req[1]], _REQ[req[2]]
        if gamma_req != _NULL:
            arrays["gamma_grad"] = in_grad[1]
        if beta_req != _NULL:
            arrays["beta_grad"] = in_grad[2]
        _push(_GRAD_SUMS, arrays, p, axis, gamma_req=gamma_req, beta_req=beta_req)
        if req[0] == "null":
            # MXNet ends the operator once the arrays it handed over are written, and may
            # then reuse the input's memory: with no input gradient to write, wait here for
            # this read of the input and of dy (local work, no peer involved).
            sums.wait_to_read()
        if self.batch_stats and not self.alone:
            # Also when this rank's input needs no gradient: the peers' may.
            table = self._slot_table()
            slot = self.slot
            if slot is None:  # a forward made outside record(): no peer waits on a slot
                slot = table.take()
            with gradient_reduction():
                allreduce_(sums, name="SyncBatchNorm.%s.backward.%d" % (p.layer, slot),
                           op=Sum, process_set=_process_set_of(p.process_set))
            table.release(slot)
            self.slot = None
        if req[0] == "null":
            return
        arrays = dict(x=x, dy=out_grad[0], mean=mean, var=var, gamma=gamma, out=in_grad[0])
        if self.batch_stats:
            arrays.update(grad_sums=sums, stats=self.stats)
        _push(_GRAD_INPUT, arrays, p, axis, out_req=_REQ[req[0]], batch_stats=self.batch_stats)


# The steps of _core.sync_bn (src/mxnet/sync_bn_op.h) and MXNet's requests as it takes them.
_STATS, _FORWARD, _GRAD_SUMS, _GRAD_INPUT = range(4)
_NULL, _WRITE, _ADD = range(3)
_REQ = {"null": _NULL, "write": _WRITE, "inplace": _WRITE, "add": _ADD}


def _push(step, arrays, p, axis, out_req=_WRITE, batch_stats=True, gamma_req=_NULL,
          beta_req=_NULL):
    """One step of the layer's local arithmetic, pushed as an engine operation that takes no
    shared resource (a reduction by MXNet's own operators would take one of the engine's
    temporary spaces; see src/mxnet/sync_bn_op.h)."""
    _core.sync_bn(step, {k: a.handle.value for k, a in arrays.items()}, axis, p.eps,
                  p.momentum, p.fix_gamma, batch_stats, out_req, gamma_req, beta_req, p.layer)


@mx.operator.register(OP_TYPE)
class _SyncBatchNormProp(mx.operator.CustomOpProp):
    """The operator's shapes and dtypes; MXNet passes every argument as a string."""

    def __init__(self, layer="", axis="1", eps="1e-5", momentum="0.9", fix_gamma="False",
                 use_global_stats="False", process_set="global"):
        super(_SyncBatchNormProp, self).__init__(need_top_grad=True)
        self.layer = layer
        self._axis = int(axis)
        self.eps = float(eps)
        self.momentum = float(np.float32(momentum))  # a C float in MXNet's BatchNorm
        self.fix_gamma = _bool(fix_gamma)
        self.use_global_stats = _bool(use_global_stats)
        self.process_set = process_set

    def axis(self, x):
        ndim = x.ndim if hasattr(x, "ndim") else len(x)
        a = self._axis + ndim if self._axis < 0 else self._axis
        if not 0 <= a < ndim:
            raise ValueError("SyncBatchNorm '%s': axis %d is out of range for an input of %d "
                             "dimensions" % (self.layer, self._axis, ndim))
        return a

    def list_arguments(self):
        return ["data", "gamma", "beta"]

    def list_outputs(self):
        return ["output"]

    def list_auxiliary_states(self):
        return ["moving_mean", "moving_var"]

    def infer_shape(self, in_shape):
        data = in_shape[0]
        c = (data[self.axis(data)],)
        return [data, c, c], [data], [c, c]

    def infer_type(self, in_type):
        data = in_type[0]
        param = np.float32 if np.dtype(data) == np.float16 else data
        return [data, param, param], [data], [param, param]

    def declare_backward_dependency(self, out_grad, in_data, out_data):
        return list(out_grad) + list(in_data)

    def create_operator(self, ctx, in_shapes, in_dtypes):
        return _SyncBatchNormOp(self, autograd.is_recording())
