"""What the ranks must agree on before a Trainer updates, where each rank alone would
decide differently: fresh gradients (``ignore_stale_grad=True``) and AMP overflow.

Fresh gradients: one blocking int32 allreduce (Sum) counts, for each gradient, the ranks
where backward wrote it since the last update.
A gradient fresh elsewhere but stale here is zeroed and marked fresh, so every rank reduces
the same sum and updates, as one process on the concatenated batch would.
A parameter stale on every rank is skipped everywhere.
AMP overflow: one int32 allreduce (Max) per step shares the loss scaler's answer, so every
rank skips the step or none does.
Used by ``DistributedTrainer`` (fresh gradients), and through
:mod:`mxhorovod.training.patches` by a ``gluon.Trainer`` over kvstore 'horovod' (fresh
gradients) or with a ``DistributedOptimizer`` (both: it reduces after AMP's check).
"""
import contextlib

import mxnet as mx
import numpy as np

from mxhorovod.collectives.join import identity_when_joined
from mxhorovod.collectives.ops import Max, Sum, allreduce
from mxhorovod.common.process_sets import global_process_set

__all__ = ["fresh_counts", "zero_stale_where_fresh_elsewhere", "mixed_freshness",
           "agreed_amp_overflow"]


def fresh_counts(params, name, process_set=global_process_set):
    """[(index, number of ranks of the set where the gradient is fresh)] for every
    parameter of the list ``params`` with ``grad_req != 'null'``, in index order; a rank
    counts once when any of its contexts holds a fresh gradient. Blocks: one int32
    allreduce (shape ``(k,)``, k such parameters) under ``name``, which every rank of
    the set must call with the same parameters (none: no collective, ``[]``)."""
    idx = [i for i, p in enumerate(params) if p.grad_req != "null"]
    if not idx:
        return []
    mine = [int(any(d._fresh_grad for d in params[i].list_data())) for i in idx]
    counts = allreduce(mx.nd.array(mine, dtype="int32"), op=Sum, name=name,
                       process_set=process_set).asnumpy()
    return list(zip(idx, counts.tolist()))


def zero_stale_where_fresh_elsewhere(params, name, process_set=global_process_set):
    """Zero, and mark fresh, each local gradient (per context) that is stale here while the
    parameter's gradient is fresh on some rank of the set; blocks (:func:`fresh_counts`)."""
    for i, count in fresh_counts(params, name, process_set):
        if count == 0:
            continue  # stale everywhere: skipped by every rank's update
        p = params[i]
        for data, grad in zip(p.list_data(), p.list_grad()):
            if data._fresh_grad:
                continue
            if grad.stype == "default":
                grad[:] = 0
            else:
                mx.nd.zeros(grad.shape, ctx=grad.context, dtype=grad.dtype,
                            stype=grad.stype).copyto(grad)
            data._fresh_grad = True  # updated here as on the ranks that used it


def mixed_freshness(params, name, ranks, process_set=global_process_set):
    """Names of the parameters whose gradient is fresh on some but not all of ``ranks``
    ranks (the set's size); blocks (:func:`fresh_counts`)."""
    return [params[i].name for i, n in fresh_counts(params, name, process_set)
            if 0 < n < ranks]


class _Overflowed(object):
    """Stands for a parameter whose gradient holds NaN, for the AMP loss scaler's
    ``has_overflow(params)`` (which reads ``p._grad[0]``) on a rank whose own gradients
    are finite while another rank's are not: its bookkeeping then takes the job's answer."""

    def __init__(self, ctx):
        self._grad = [mx.nd.array([np.nan], ctx=ctx)]


def _overflow_here(params):
    """True when a gradient of ``params`` (``p._grad[0]``, as the loss scaler reads them)
    holds an inf or NaN; waits for the gradients."""
    grads = [p._grad[0] for p in params if p._grad is not None]
    if not grads:
        return False
    finite = mx.nd.ones((1,), ctx=grads[0].context)
    for k in range(0, len(grads), 200):  # the loss scaler's chunk size
        chunk = grads[k:k + 200]
        mx.nd.multi_all_finite(*chunk, num_arrays=len(chunk), init_output=False, out=finite)
    return not bool(finite.asscalar())


@contextlib.contextmanager
def agreed_amp_overflow(trainer, name, process_set=global_process_set):
    """Within the block, ``trainer``'s AMP loss scaler (``amp.init_trainer``), if any,
    answers ``has_overflow`` for the whole set: True on every rank when any rank's
    gradients hold an inf or NaN (one blocking int32 allreduce, Max, under ``name``, at
    each call; every rank of the set calls it once per ``_update``)."""
    scaler = getattr(trainer, "_amp_loss_scaler", None)
    if scaler is None:
        yield
        return
    original = scaler.has_overflow

    def has_overflow(params):
        mine = _overflow_here(params)
        with identity_when_joined():  # a joined rank: no overflow
            anywhere = allreduce(mx.nd.array([int(mine)], dtype="int32"), op=Max, name=name,
                                 process_set=process_set).asscalar() > 0
        if anywhere and not mine:
            ctx = next((p._grad[0].context for p in params if p._grad is not None),
                       mx.cpu())
            params = [_Overflowed(ctx)]
        return original(params)

    scaler.has_overflow = has_overflow  # shadows the method for this call only
    try:
        yield
    finally:
        del scaler.has_overflow
