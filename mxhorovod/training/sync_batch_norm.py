"""SyncBatchNorm: gluon.nn.BatchNorm over the whole batch of every rank of a process set.

The layer is an MXNet Python custom operator (``mx.operator.CustomOp``): MXNet runs its
forward and backward on its own pool of threads for custom operators, not on an engine
worker, and each call only pushes work (NDArray operations, the extension's asynchronous
allreduce) whose results the outputs depend on; it never waits for the peers. MXNet completes the
operator once every array handed to the call has been written (docs/design.md,
"SyncBatchNorm"). Collectives are named per layer and direction, never by order:

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
    of the statistics). After a forward and its backward they are the same; a training
    forward that is never differentiated updates them here and not in BatchNorm.

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
        self.count = self.mean = self.var = None  # the last forward's statistics

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
        acc = gamma.dtype  # float32 for float16 input (gluon keeps the parameters float32)
        table = self._slot_table()
        if self.slot is not None:  # a reused pass (static_shape): its backward is done
            table.release(self.slot)
            self.slot = None
        if not self.batch_stats:
            mean, var = moving_mean, moving_var
        else:
            ps = _process_set_of(p.process_set)
            what = "SyncBatchNorm '%s'" % p.layer
            pid = set_id(ps, what)
            if pid != 0 and ps.included() is False:
                raise InvalidArgumentError("%s: this rank is not in its process set (ranks %s)"
                                           % (what, ps.ranks))
            xa = x.astype(acc, copy=False)
            n = x.size // c
            bshape = [1] * x.ndim
            bshape[axis] = c
            # This rank's mean, and its squared deviations from it (two passes: no
            # cancellation); the ranks add count, sum and sum of squares (rebuilt as n * mean
            # and M2 + n * mean^2) in float64, where var = E[x^2] - E[x]^2 loses only
            # 1e-16 * mean^2 / var (float32 sums of x and x^2 gave a channel of mean 100
            # and std 0.01 a variance of 0).
            s1 = mx.nd.sum(xa, axis=axis, exclude=True)
            mine = s1 / max(n, 1)
            m2 = mx.nd.sum(mx.nd.square(mx.nd.broadcast_sub(xa, mine.reshape(bshape))),
                           axis=axis, exclude=True)
            mine64 = mine.astype("float64")  # n * mine, not s1: the same mean in both sums
            local = mx.nd.concat(mx.nd.full((1,), n, dtype="float64"), mine64 * n,
                                 m2.astype("float64") + mine64 * mine64 * n, dim=0)
            self.alone = set_size(ps, what) == 1
            if not self.alone:
                if self.recording or self.forwards:  # a backward may come
                    self.slot = table.take()
                # The input's channels and dtype, which the core checks against the peers'.
                shape_and_dtype = mx.nd.zeros((c,), dtype=x.dtype)
                with gradient_reduction():  # never wait here for the arrays' layout
                    grouped_allreduce_([shape_and_dtype, local], op=Sum, process_set=ps,
                                       name="SyncBatchNorm.%s.forward" % p.layer)
            moments = mx.nd.broadcast_div(local[1:].reshape((2, c)), local[0:1])
            mean = moments[0].astype(acc)
            var = mx.nd.relu(moments[1] - mx.nd.square(moments[0])).astype(acc)  # biased
            self.count = local[0:1].astype(acc)
            for running, stat in ((moving_mean, mean), (moving_var, var)):
                running *= p.momentum
                running += stat * (1 - p.momentum)
        self.forwards += 1
        self.mean, self.var = mean, var
        # y = x * scale + shift per channel, scale = gamma / sqrt(var + eps), shift = beta -
        # mean * scale, with broadcast operators: MXNet's own BatchNorm (an MKLDNN kernel)
        # would write the output array in MKLDNN's blocked layout, which the caller, handed
        # the same memory as a plain array, read scrambled.
        bshape = [1] * x.ndim
        bshape[axis] = c
        g = mx.nd.ones_like(gamma) if p.fix_gamma else gamma
        scale = g * mx.nd.rsqrt(var + p.eps)
        shift = beta - mean * scale
        scaled = mx.nd.broadcast_mul(x.astype(acc, copy=False), scale.reshape(bshape))
        if req[0] in ("write", "inplace") and acc == x.dtype:
            mx.nd.broadcast_add(scaled, shift.reshape(bshape), out=out_data[0])
        else:
            y = mx.nd.broadcast_add(scaled, shift.reshape(bshape))
            self.assign(out_data[0], req[0], y.astype(x.dtype, copy=False))

    def backward(self, req, out_grad, in_data, out_data, in_grad, aux):
        p = self.p
        x, gamma, _ = in_data
        acc = gamma.dtype
        axis = p.axis(x)
        c = x.shape[axis]
        bshape = [1] * x.ndim
        bshape[axis] = c
        xa = x.astype(acc, copy=False)
        dy = out_grad[0].astype(acc, copy=False)
        # The statistics of the forward (the running ones at this backward, as BatchNorm).
        mean, var = (self.mean, self.var) if self.batch_stats else aux
        invstd = mx.nd.rsqrt(var + p.eps)
        xhat = mx.nd.broadcast_mul(mx.nd.broadcast_sub(xa, mean.reshape(bshape)),
                                   invstd.reshape(bshape))
        sum_dy = mx.nd.sum(dy, axis=axis, exclude=True)
        sum_dy_xhat = mx.nd.sum(dy * xhat, axis=axis, exclude=True)
        # gamma and beta: this rank's part (the trainer's allreduce adds the ranks' parts).
        if not p.fix_gamma:
            self.assign(in_grad[1], req[1], sum_dy_xhat)
        elif req[1] != "null":
            self.assign(in_grad[1], req[1], mx.nd.zeros_like(sum_dy_xhat))
        self.assign(in_grad[2], req[2], sum_dy)
        if self.batch_stats:
            # Also when this rank's input needs no gradient: the peers' may.
            total = mx.nd.concat(sum_dy, sum_dy_xhat, dim=0)
            if not self.alone:
                table = self._slot_table()
                slot = self.slot
                if slot is None:  # a forward made outside record(): no peer waits on a slot
                    slot = table.take()
                with gradient_reduction():
                    allreduce_(total, name="SyncBatchNorm.%s.backward.%d" % (p.layer, slot),
                               op=Sum, process_set=_process_set_of(p.process_set))
                table.release(slot)
                self.slot = None
        if req[0] == "null":
            # MXNet ends the operator once the arrays it handed over are written, and may
            # then reuse the input's memory: when no input gradient depends on the sums
            # (and gamma's or beta's may not be asked for either), wait for these readers
            # of the input and of dy here (local work, no peer involved).
            sum_dy.wait_to_read()
            sum_dy_xhat.wait_to_read()
            return
        g = mx.nd.ones_like(gamma) if p.fix_gamma else gamma
        scale = (g * invstd).reshape(bshape)
        if self.batch_stats:
            means = mx.nd.broadcast_div(total.reshape((2, c)), self.count)
            dx = mx.nd.broadcast_sub(dy, means[0].reshape(bshape)) - \
                mx.nd.broadcast_mul(xhat, means[1].reshape(bshape))
        else:
            dx = dy
        if req[0] in ("write", "inplace") and dx.dtype == x.dtype:
            mx.nd.broadcast_mul(dx, scale, out=in_grad[0])
        else:
            self.assign(in_grad[0], req[0], mx.nd.broadcast_mul(dx, scale).astype(x.dtype, copy=False))


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
