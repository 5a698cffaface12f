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
pass. Engine order only: nothing waits. Cost: two copies of the convolution weights per update
(two queued operations each: about 0.25 ms per update for the MNIST example's two), for
these optimizers only (the others give the same bits in both layouts), and only where the
update is one of several ranks' (one process has no peer to differ from).
"""
import mxnet as mx
import numpy as np

from mxhorovod.collectives.submit import MKLDNN

__all__ = ["layout_sensitive", "settle_weights"]

_FLOAT32 = np.dtype(np.float32)


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
