"""The optimizer update sees the same memory on every rank: weights are put back in the plain
layout before an update whose result depends on MXNet's MKLDNN layout.

MXNet 1.9.1's ``nag_mom_update`` (NAG with momentum) and ``rmspropalex_update`` (RMSProp
with ``centered=True``) read the weight again after writing the output. Run in place
(``out=weight``, as every MXNet optimizer calls them) on a weight in the plain layout, the
momentum (NAG) or the weight (centered RMSProp) is computed from the new weight; on a
weight that MKLDNN holds in its blocked layout, the engine runs the kernel on a plain copy
and a separate output, and the state is computed from the old weight: other bits (NAG:
up to 0.3% of the momentum's value, in almost every element, with weight decay).
An inference-mode forward (an evaluation pass) leaves a convolution's or dense layer's
weight in that layout, and the next training forward queues its conversion back while it
runs, so whether the update comes before or after that conversion depends on timing:
ranks that started equal drift apart by a few ulp (issue 48, item 5).

:func:`settle_weights` queues, before the update, a copy of each weight that MKLDNN may hold
and a write of that copy back into the weight: a write that does not read the weight
leaves it in the plain layout whatever it was, with the same values. The update then runs
in place on plain memory on every rank, exactly as one process does without an evaluation
pass. Engine order only: nothing waits.

Only inference-mode forwards leave weights in MKLDNN's layout, so a :class:`Settler` (one
per trainer or optimizer) settles a weight only when an inference-mode forward has run in
this process since it last settled it: a Gluon ``Parameter.data()`` read outside
``autograd.train_mode()`` (every Gluon forward reads its parameters so, hybridized or
not), or an ``Executor.forward(is_train=False)`` (Module's ``predict``, ``score``),
counted by :func:`install_inference_counter`. Training alone costs nothing; the first
update after an evaluation pass pays two copies of the convolution weights (ResNet-50:
about 0.14 s on one thread of this machine, once per evaluation pass), for these
optimizers only (the others give the same bits in both layouts), and only where the update
is one of several ranks' (one process has no peer to differ from). A convolution run
directly on a weight (``mx.nd.Convolution(x, w)``) outside training mode is not counted:
the parameter check (:mod:`mxhorovod.checks.parameter_check`) would report the drift.
"""
import functools
import threading

import mxnet as mx
import numpy as np

from mxhorovod.collectives.submit import MKLDNN

__all__ = ["Settler", "install_inference_counter", "layout_sensitive", "settle_weights"]

_FLOAT32 = np.dtype(np.float32)


class _Training(threading.local):
    on = False  # autograd's training mode of this thread (MXNet's is per thread; off at start)


_training = _Training()
_inference_reads = [0]  # inference-mode parameter reads and executor forwards so far


def layout_sensitive(optimizer):
    """Whether ``optimizer``'s in-place update gives other bits on a weight in MKLDNN's
    layout than on a plain one (see the module doc): NAG with momentum, centered RMSProp
    (and their subclasses). A ``DistributedOptimizer`` is judged by the optimizer it wraps.
    Always False without MKLDNN."""
    if not MKLDNN or optimizer is None:
        return False
    inner = getattr(optimizer, "_optimizer", None)  # a DistributedOptimizer's
    opt = inner if isinstance(inner, mx.optimizer.Optimizer) else optimizer
    if isinstance(opt, mx.optimizer.NAG):
        return bool(getattr(opt, "momentum", 0.0))  # momentum 0: sgd_update, no state
    if isinstance(opt, mx.optimizer.RMSProp):
        return bool(getattr(opt, "centered", False))
    return False


def _may_be_blocked(weight):
    # An inference-mode forward leaves float32 convolution weights (3 to 5 dimensions) in
    # MKLDNN's layout; MXNet 1.9.1 keeps dense layers' (2) in the plain one (seen here for
    # every shape and batch tried, hybridized or not), and other dtypes (float16: the master
    # copy of multi_precision is a state, not the weight) and sparse storage never.
    return weight.stype == "default" and 3 <= weight.ndim <= 5 and \
        np.dtype(weight.dtype) == _FLOAT32


def settle_weights(weights):
    """Queues, for each NDArray of ``weights`` (a list, or nested lists per context) that
    MKLDNN may hold in its own layout (float32 convolution weights), a copy and a write of the copy back (see the module
    doc): the next operation on it, the update, finds it in the plain layout. Never waits.
    Call it after backward has been queued and before the update is."""
    with mx.autograd.pause():  # a step inside autograd.record() must not record these
        for w in weights:
            if isinstance(w, (list, tuple)):
                settle_weights(w)
            elif _may_be_blocked(w):
                # identity writes (kWriteTo) an array it does not read: MXNet drops the
                # weight's MKLDNN memory and writes the plain layout. w.copy() reads either.
                mx.nd.identity(w.copy(), out=w)


class Settler(object):
    """One per trainer or optimizer: ``settle(keys, weights_of)`` before an update settles
    the weights of the keys (parameters' indices) not settled since the last inference-mode
    forward of this process (see the module doc); ``weights_of(keys)`` gives their arrays,
    called only then (training alone costs a dictionary lookup per key)."""

    def __init__(self):
        self._seen = {}  # key -> _inference_reads when last settled

    def settle(self, keys, weights_of):
        now = _inference_reads[0]
        seen = self._seen
        stale = [k for k in keys if seen.get(k) != now]
        if stale:
            for k in stale:
                seen[k] = now
            settle_weights(weights_of(stale))


def install_inference_counter():
    """Wraps ``mx.autograd.set_training`` (which ``record``, ``train_mode`` and
    ``predict_mode`` call) to follow each thread's training mode, and counts
    ``gluon.Parameter.data`` calls outside it and ``Executor.forward(is_train=False)``
    (see the module doc). Idempotent."""
    if getattr(mx.autograd.set_training, "_mxhorovod_follows", False):
        return
    original_set = mx.autograd.set_training

    @functools.wraps(original_set)
    def set_training(train_mode):
        previous = original_set(train_mode)
        _training.on = bool(train_mode)
        return previous

    set_training._mxhorovod_follows = True
    mx.autograd.set_training = set_training
    _training.on = bool(mx.autograd.is_training())

    original_data = mx.gluon.Parameter.data

    @functools.wraps(original_data)
    def data(self, ctx=None):
        if not _training.on:
            _inference_reads[0] += 1
        return original_data(self, ctx)

    mx.gluon.Parameter.data = data

    original_forward = mx.executor.Executor.forward

    @functools.wraps(original_forward)
    def forward(self, is_train=False, **kwargs):
        if not is_train:
            _inference_reads[0] += 1
        return original_forward(self, is_train, **kwargs)

    mx.executor.Executor.forward = forward
