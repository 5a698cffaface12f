"""What the ranks must agree on before a Trainer updates, where each rank alone would
decide differently: fresh gradients (``ignore_stale_grad=True``) and AMP overflow.

Fresh gradients. A gradient is *fresh* on a rank when backward wrote it since the last
update (MXNet's ``data._fresh_grad`` flag, per context). ``gluon.Trainer`` with
``ignore_stale_grad=True`` skips a parameter whose gradient is stale on this rank. When a
parameter was used on some ranks only (a branch taken by some ranks' data), the reduction
averages or sums the stale ranks' leftover gradients in, and only the fresh ranks update:
the ranks' weights drift apart without a word. One process on the concatenated batch
instead updates the parameter with a gradient to which the rows that did not use it
contribute zero. So, before the reduction, the ranks agree (one small blocking int32
allreduce, Sum) on the number of ranks where each gradient is fresh; where it is fresh on
some rank but stale here, the local gradient is zeroed and marked fresh, so every rank
reduces the same sum and every rank updates. A parameter stale on every rank is left alone
and skipped everywhere.

AMP overflow. ``amp.init_trainer(trainer)`` makes ``Trainer._update`` skip the step when
the loss scaler finds an inf or NaN gradient (and halve the loss scale). With
``DistributedOptimizer`` in a plain ``gluon.Trainer`` that check runs before the
reduction, on this rank's own gradients: a rank that overflowed skipped the optimizer (and
its allreduces) while the others ran it, so the job stalled, or went on with the ranks a
step apart and different loss scales. The ranks now take the check's answer from every
rank (one int32 allreduce, Max, per step): all skip, or none. (``DistributedTrainer`` and
kvstore 'horovod' reduce first, so an inf reaches every rank's check by itself.)

Batch sizes (:mod:`mxhorovod.batch_check`): every step of such a Trainer also submits one
64-byte allreduce of its ``batch_size``, read at its step after next: ranks that passed
different sizes are warned once (their updates differed).

``update()`` without ``allreduce_grads()`` since the last update reduces the gradients
itself (:mod:`mxhorovod.unreduced`): the wrapped ``allreduce_grads`` records that it ran.

Used by ``DistributedTrainer`` (fresh gradients), and by a plain ``gluon.Trainer`` over
kvstore 'horovod' (fresh gradients) or with a ``DistributedOptimizer`` (both): importing
mxhorovod wraps ``gluon.Trainer.step`` and ``update`` (:func:`install_trainer_agreement`).
Without it the kvstore case drifted apart as above, and the ``DistributedOptimizer`` case
stalled: the Trainer calls the optimizer for fresh parameters only, so only the fresh
ranks reduced the parameter and waited for the others.
"""
import contextlib
import functools

import mxnet as mx
import numpy as np

from mxhorovod.batch_check import BatchSizeCheck
from mxhorovod.layout_check import LayoutCheck, check_one_context
from mxhorovod.mpi_ops import Max, Sum, allreduce
from mxhorovod.process_sets import global_process_set
from mxhorovod.unreduced import mark_reduced, needs_reduction, reduced_before_step, was_reduced

__all__ = ["fresh_counts", "zero_stale_where_fresh_elsewhere", "mixed_freshness",
           "agreed_amp_overflow", "install_trainer_agreement"]


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


def _refuse_sparse(trainer):
    """A Trainer over kvstore 'horovod' with sparse parameters: MXNet refuses any custom
    kvstore there, saying 'Cannot use <class ...Horovod> for multi-device training with
    sparse gradients' (also on one device, and naming no parameter). Says which parameters
    and what trains them instead."""
    sparse = [p.name for p in trainer._params
              if p._grad_stype != "default" or p._stype != "default"]
    if sparse:
        raise ValueError(
            "gluon.Trainer over kvstore 'horovod': parameter %s %s a row_sparse gradient or "
            "weight (Embedding(sparse_grad=True)?), which MXNet does not let a custom kvstore "
            "reduce. Use hvd.DistributedTrainer, or a gluon.Trainer with "
            "hvd.DistributedOptimizer and kvstore=None: both average row_sparse gradients"
            % (", ".join("'%s'" % n for n in sparse[:4]) +
               (", ... (%d in all)" % len(sparse) if len(sparse) > 4 else ""),
               "has" if len(sparse) == 1 else "have"))


def _agreement(trainer, what="fresh"):
    """(collective name for ``what``, process set, its size) for a plain ``gluon.Trainer``
    whose ranks must agree (on fresh gradients, on batch sizes), or None: a Trainer over
    kvstore 'horovod' (the string or an instance; the kvstore is made now if its first step
    has not made it yet, as step/update do first anyway) or with a ``DistributedOptimizer``
    on a rank of its set, with more than one rank. ``DistributedTrainer`` (no kvstore, its
    own agreement) and every other Trainer: None."""
    from mxhorovod.kvstore import Horovod
    from mxhorovod.optimizer import DistributedOptimizer
    from mxhorovod.process_sets import _outside
    from mxhorovod.process_sets import _size as _ps_size
    config = getattr(trainer, "_kvstore_params", {}).get("kvstore")
    if isinstance(config, Horovod) or (isinstance(config, str) and config.lower() == "horovod"):
        if not trainer._kv_initialized:
            _refuse_sparse(trainer)
            trainer._init_kvstore()
        store = trainer._kvstore
        if isinstance(store, Horovod) and store.num_workers > 1:
            return store._name(what, "step"), global_process_set, store.num_workers
        return None
    opt = getattr(trainer, "_optimizer", None)
    if isinstance(opt, DistributedOptimizer):
        ps = opt._process_set
        if _outside(ps):
            return None
        n = _ps_size(ps, "DistributedOptimizer")
        if n > 1:
            opt._name(what)  # numbers the wrapper (its first reduction) if not yet
            return opt._prefix + what, ps, n
    return None


def install_trainer_agreement():
    """Wraps ``gluon.Trainer.step`` and ``update`` for the Trainers of :func:`_agreement`.
    With ``ignore_stale_grad=True``, ``step`` (and, with a ``DistributedOptimizer``, whose
    reduction is still to come, ``update``) zeroes a gradient stale here but fresh
    elsewhere and marks it fresh; ``update`` after ``allreduce_grads()`` over kvstore
    'horovod', which has already summed the stale gradients in, raises ValueError on every
    rank naming them. With a ``DistributedOptimizer`` and an AMP loss scaler, the ranks
    agree on overflow (:func:`agreed_amp_overflow`). Every ``step`` / ``update`` of such a
    Trainer checks its batch size against the peers' (:mod:`mxhorovod.batch_check`).
    Other Trainers run MXNet's code unchanged. Idempotent.
    """
    from mxhorovod.optimizer import DistributedOptimizer
    trainer_cls = mx.gluon.Trainer
    if getattr(trainer_cls.step, "_mxhorovod_stale", False):
        return
    original_step, original_update = trainer_cls.step, trainer_cls.update
    original_allreduce_grads = trainer_cls.allreduce_grads

    def needed(trainer, ignore_stale_grad):
        if ignore_stale_grad or getattr(trainer, "_amp_loss_scaler", None) is not None:
            return _agreement(trainer)
        return None

    def amp_context(trainer, agree):
        from mxhorovod.optimizer import DistributedOptimizer
        if agree is not None and isinstance(trainer._optimizer, DistributedOptimizer):
            return agreed_amp_overflow(trainer, agree[0] + ".overflow", agree[1])
        return contextlib.nullcontext()

    def check_batch_size(trainer, batch_size, method="step"):
        # Ranks passing different batch sizes update differently (mxhorovod.batch_check).
        target = _agreement(trainer, "batch_size")
        if target is not None:
            check = vars(trainer).get("_mxhorovod_batch_check")
            if check is None:
                check = trainer._mxhorovod_batch_check = BatchSizeCheck("Trainer")
            check.submit(batch_size, target[0], target[1], method, trainer._optimizer)

    def check_layout(trainer):
        # Ranks reducing different parameters wait for each other forever: an error on
        # every rank instead (mxhorovod.layout_check; blocking only when it changed).
        target = _agreement(trainer, "layout")
        if target is not None:
            if isinstance(trainer._optimizer, DistributedOptimizer):
                if not trainer._kv_initialized:
                    trainer._init_kvstore()  # as step/update do first anyway
                if trainer._kvstore is None:
                    check_one_context(trainer._contexts, "gluon.Trainer with a "
                                      "DistributedOptimizer")
            check = vars(trainer).get("_mxhorovod_layout_check")
            if check is None:
                check = trainer._mxhorovod_layout_check = LayoutCheck()
            wrapped = isinstance(trainer._optimizer, DistributedOptimizer)
            check.check(trainer._params, target[0], target[1],
                        "Trainer with %s" % ("a DistributedOptimizer" if wrapped
                                             else "kvstore 'horovod'"),
                        trainer._optimizer._reduction_settings() if wrapped else (),
                        contexts=len(trainer._contexts) if trainer._contexts else None)

    def over_kvstore(trainer):  # kvstore 'horovod', more than one rank
        return not isinstance(trainer._optimizer, DistributedOptimizer) and \
            _agreement(trainer, "fresh") is not None

    @functools.wraps(original_step)
    def step(self, batch_size, ignore_stale_grad=False):
        if was_reduced(self) and over_kvstore(self) and \
                reduced_before_step(self, "Trainer (kvstore 'horovod')"):
            return update(self, batch_size, ignore_stale_grad)  # summing again: size() x
        try:
            check_layout(self)
            check_batch_size(self, batch_size)
            agree = needed(self, ignore_stale_grad)
            if agree is not None and ignore_stale_grad:
                zero_stale_where_fresh_elsewhere(self._params, agree[0], agree[1])
            with amp_context(self, agree):
                return original_step(self, batch_size, ignore_stale_grad)
        finally:
            mark_reduced(self, False)  # also when it raised: the next update must reduce

    @functools.wraps(original_allreduce_grads)
    def allreduce_grads(self):
        original_allreduce_grads(self)
        mark_reduced(self)

    @functools.wraps(original_update)
    def update(self, batch_size, ignore_stale_grad=False):
        try:
            return checked_update(self, batch_size, ignore_stale_grad)
        finally:
            mark_reduced(self, False)  # also when it raised: the next update must reduce

    def checked_update(self, batch_size, ignore_stale_grad):
        check_layout(self)
        check_batch_size(self, batch_size, "update")
        agree = needed(self, ignore_stale_grad)
        if over_kvstore(self) and needs_reduction(self, "Trainer (kvstore 'horovod')", "summed"):
            if ignore_stale_grad:  # as step() does
                zero_stale_where_fresh_elsewhere(self._params, agree[0], agree[1])
            self.allreduce_grads()
        elif agree is not None and ignore_stale_grad:
            if isinstance(self._optimizer, DistributedOptimizer):
                zero_stale_where_fresh_elsewhere(self._params, agree[0], agree[1])
            else:
                mixed = mixed_freshness(self._params, agree[0], agree[2], agree[1])
                if mixed:
                    raise ValueError(
                        "Trainer.update(ignore_stale_grad=True) over kvstore 'horovod': the "
                        "gradients of %s are fresh on some ranks and stale on others, and "
                        "allreduce_grads() has summed the stale ones in; use "
                        "step(batch_size, ignore_stale_grad=True)"
                        % ", ".join("'%s'" % m for m in mixed))
        with amp_context(self, agree):
            return original_update(self, batch_size, ignore_stale_grad)

    step._mxhorovod_stale = update._mxhorovod_stale = True
    trainer_cls.step, trainer_cls.update = step, update
    trainer_cls.allreduce_grads = allreduce_grads
