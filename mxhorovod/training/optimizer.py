"""DistributedOptimizer: any MXNet optimizer, with gradients averaged over ranks first.

For the Module API (``mod.fit(..., optimizer=opt, kvstore=None)``) and for a plain
``gluon.Trainer`` on one context per rank. Each ``update`` / ``update_multi_precision``
call first averages the given gradients over all ranks in place (allreduce, ``op=Average``),
then runs the wrapped optimizer on the mean gradient. Unlike Horovod's CPU wrapper, the
wrapper does not touch ``rescale_grad``: set it to ``1.0 / batch_size`` (per-rank batch) as
in single-process training.
"""
import mxnet as mx
import numpy as np

from mxhorovod.collectives.join import identity_when_joined
from mxhorovod.collectives.ops import Adasum, Average, Max, allreduce_, grouped_allreduce_
from mxhorovod.collectives.submit import gradient_reduction, op_name
from mxhorovod.common.basics import size
from mxhorovod.common.naming import next_number
from mxhorovod.common.process_sets import (ProcessSet, check_member, global_process_set,
                                           outside, set_id, set_size)
from mxhorovod.common.process_sets import unpickle_set
from mxhorovod.training.accumulation import Accumulation, check_passes
from mxhorovod.training.adasum import AdasumDeltas
from mxhorovod.training import samples, update_layout

__all__ = ["DistributedOptimizer", "split_list", "allreduce_row_sparse_"]


def split_list(items, num_groups):
    """Split ``items`` into ``min(num_groups, len(items))`` contiguous, nearly equal parts.

    The first ``len(items) % groups`` parts hold one item more than the others, as in
    Horovod (which uses it to form the ``num_groups`` of grouped allreduces). A local
    helper: no collective, the same result on every rank for the same input.

    Args:
        items: a sequence (a list of parameters or NDArrays, ...).
        num_groups: the number of parts wanted; values below 1 give one part.
    Returns:
        A list of lists, in order; ``[[]]`` for an empty ``items``.
    """
    num_groups = max(1, min(num_groups, len(items)))
    q, r = divmod(len(items), num_groups)
    out, start = [], 0
    for g in range(num_groups):
        stop = start + q + (1 if g < r else 0)
        out.append(list(items[start:stop]))
        start = stop
    return out


def allreduce_row_sparse_(grad, name, priority=0, **reduce_kwargs):
    """Reduce a row_sparse gradient over the ranks, in place; blocks until done.

    The core refuses row_sparse arrays. The dense form of ``grad`` (its shape ``(rows,
    ...)``, its dtype) is reduced with ``reduce_kwargs`` (``op``, scale factors,
    ``process_set``) under ``name``, and the set of rows present on any rank (a float32
    0/1 mask of shape ``(rows,)``, ``op=Max``) under ``name + '.rows'``; ``grad`` is then
    overwritten by a row_sparse array holding exactly those rows. A lazy update (SGD,
    Adam with ``lazy_update``) thus touches the rows one process on the whole batch would
    touch, even where the reduced values happen to be zero. Every rank of the set must
    call it for the same name with the same shape and dtype (as any collective).
    """
    dense = grad.tostype("default")
    mask_np = np.zeros((grad.shape[0],), dtype=np.float32)
    mask_np[grad.indices.asnumpy().astype(np.int64)] = 1.0
    mask = mx.nd.array(mask_np, ctx=grad.context)
    allreduce_(dense, name=name, priority=priority, **reduce_kwargs)
    with identity_when_joined():  # a joined rank's rows: none
        allreduce_(mask, name=name + ".rows", priority=priority, op=Max,
                   process_set=reduce_kwargs.get("process_set", global_process_set))
    rows = np.nonzero(mask.asnumpy())[0].astype(np.int64)
    if rows.size == 0:
        result = mx.nd.sparse.zeros("row_sparse", grad.shape, ctx=grad.context,
                                    dtype=grad.dtype)
    else:
        idx = mx.nd.array(rows, ctx=grad.context, dtype=np.int64)
        result = mx.nd.sparse.row_sparse_array(
            (mx.nd.take(dense, idx), idx), shape=grad.shape, ctx=grad.context,
            dtype=grad.dtype)
    result.copyto(grad)



class DistributedOptimizer(mx.optimizer.Optimizer):
    """Wrap ``optimizer`` so that every update uses the gradient averaged over all ranks.

    Args:
        optimizer: an ``mx.optimizer.Optimizer`` instance (SGD, NAG, Adam, LAMB, ...).
        gradient_predivide_factor: gradients are multiplied by ``1/f`` before the sum and
            by ``f/size`` after it; the result is the mean for any ``f`` (``f`` only moves
            where the division happens, e.g. to avoid float16 overflow).
        num_groups: when > 0, the gradients of one update call are sent in this many
            grouped allreduces instead of one allreduce each.
        process_set: the ranks whose gradients are averaged (default: all); every rank of
            the set must train with it. On a rank outside the set the wrapper reduces
            nothing: that rank updates with its own gradients, as one process would
            (Horovod's CPU build also divides them by the set's size). Pickled with the
            wrapper (``gluon.Trainer.save_states``) as its ranks: unpickled, the wrapper
            reduces over the set registered at that time with the same ranks (an id is
            only valid in the session that gave it). ``gluon.Trainer.load_states`` keeps
            the Trainer's own wrapper (this set, ``num_groups``, the predivide factor)
            around the loaded optimizer, and loads a pickled wrapper into a Trainer made
            without one as its plain optimizer (:mod:`mxhorovod.training.patches`).

        backward_passes_per_step: keyword only; k >= 1 (default 1). Gradient accumulation,
            as Horovod's PyTorch optimizer: run k backward passes (k micro-batches), then
            update once (``trainer.step(batch_size)`` with ``batch_size`` this rank's samples
            over the k passes; ``mod.update()`` with ``rescale_grad=1.0 / (k * B)``, B the
            module's batch). The gradients add up locally and each is averaged over the
            ranks once per k passes; that equals one process updating on the whole batch
            (every rank, every pass). For k > 1 the wrapper owns the gradients: in a
            ``gluon.Trainer``, parameters with ``grad_req='write'`` get ``'add'`` when the
            Trainer is made (make it before the first backward); a Module must be bound
            with ``grad_req='add'``; every gradient is zeroed after each update. The
            passes are this process's backward calls (``autograd.backward``,
            ``NDArray.backward``, ``Module.backward``, ``Executor.backward``), as for
            ``DistributedTrainer``. Only ``gluon.Trainer.step`` / ``update`` and
            ``Module.update`` update such a wrapper.
        op: keyword only; ``hvd.Average`` (default) or ``hvd.Adasum``: each rank runs the
            wrapped optimizer's step on its own gradient and the steps' changes to the
            weights are combined with Adasum, as ``DistributedTrainer(op=hvd.Adasum)``
            (:mod:`mxhorovod.training.adasum`). Not with ``gradient_predivide_factor``.

    Each update uses the mean over the samples the ranks processed, as
    ``DistributedTrainer.step`` (:mod:`mxhorovod.training.samples`): the patched
    ``gluon.Trainer.step`` / ``update`` send each rank's ``batch_size``, and
    ``Module.update`` each rank's ``1 / rescale_grad``, in one small allreduce; the update's
    ``rescale_grad`` becomes ``ranks / total`` times the Trainer's scale (the Module's own
    ``rescale_grad`` is restored after the update). Ranks may then pass different batch
    sizes, and ranks joined by ``hvd.join()`` add no samples.

    Every attribute other than the wrapper's own is read from and written to the wrapped
    optimizer: ``learning_rate``, ``lr_scheduler``, ``create_state``, ... and the
    ``param_dict``, ``idx2name``, ``rescale_grad``, ``lr_mult``/``wd_mult`` that
    ``gluon.Trainer`` and ``Module`` set, so weight decay and multipliers behave exactly
    as without the wrapper.

    row_sparse gradients (``Embedding(sparse_grad=True)``, in Module or Gluon) are
    averaged densely and written back holding the rows that any rank touched, as
    ``DistributedTrainer`` does (:func:`allreduce_row_sparse_`; this waits for the
    reduction). One context per rank with a plain ``gluon.Trainer``; for ``gluon`` prefer
    ``DistributedTrainer``: in a plain ``gluon.Trainer`` the reduction happens in
    ``update`` / ``step``, so ``trainer.allreduce_grads()`` reduces nothing and gradient
    clipping between it and ``update`` clips each rank's own gradient (as in Horovod). A
    plain ``gluon.Trainer`` calls the optimizer for fresh parameters only; with
    ``ignore_stale_grad=True`` the ranks first agree on fresh gradients
    (:mod:`mxhorovod.checks.agreement`), so a parameter used on some ranks only is reduced and
    updated on every rank instead of stalling the ranks that used it.

    Raises:
        TypeError: ``optimizer`` is not an ``mx.optimizer.Optimizer``.
        ValueError: ``op`` is neither Average nor Adasum (or Adasum with a predivide
            factor); ``backward_passes_per_step`` is not an int >= 1; with k > 1: when a
            ``gluon.Trainer`` is made with it over a row_sparse gradient; at
            ``Module.init_optimizer`` or ``update`` when the Module was bound with
            ``grad_req='write'`` (bind with ``grad_req='add'``); at ``trainer.step`` /
            ``update`` / ``mod.update`` after fewer than k passes since the last update,
            saying how many are missing (before anything is sent), or when a gradient was
            set to ``grad_req='write'`` since; at an update from anywhere else.
    """

    # Names that live on the wrapper itself (set below the class: its own methods plus
    # these instance attributes); all others go to the wrapped optimizer.
    _STATE = ("_optimizer", "_gradient_predivide_factor", "_num_groups", "_prefix",
              "_device_id", "_process_set", "_backward_passes_per_step", "_op")

    def __init__(self, optimizer, gradient_predivide_factor=1.0, num_groups=0,
                 process_set=global_process_set, *, backward_passes_per_step=1, op=Average):
        # Deliberately no Optimizer.__init__: all optimizer state lives in ``optimizer``.
        if op not in (Average, Adasum):
            raise ValueError("DistributedOptimizer: op must be hvd.Average or hvd.Adasum, "
                             "got %s" % op_name(op))
        if op == Adasum and gradient_predivide_factor != 1.0:
            raise ValueError("DistributedOptimizer(op=hvd.Adasum) reduces each rank's "
                             "update, not its gradient: gradient_predivide_factor is not "
                             "taken with it")
        if isinstance(optimizer, DistributedOptimizer):
            raise TypeError("optimizer is already a DistributedOptimizer")
        if not isinstance(optimizer, mx.optimizer.Optimizer):
            raise TypeError("DistributedOptimizer wraps an mx.optimizer.Optimizer, got %s"
                            % type(optimizer).__name__)
        if gradient_predivide_factor <= 0:
            raise ValueError("gradient_predivide_factor must be > 0, got %r"
                             % (gradient_predivide_factor,))
        object.__setattr__(self, "_optimizer", optimizer)
        object.__setattr__(self, "_gradient_predivide_factor", float(gradient_predivide_factor))
        object.__setattr__(self, "_num_groups", int(num_groups))
        object.__setattr__(self, "_prefix", None)  # numbered at the first reduction (_name)
        object.__setattr__(self, "_device_id", 0)  # position of the current context
        object.__setattr__(self, "_devices", {})  # device id -> position, in order first seen
        object.__setattr__(self, "_settler", update_layout.Settler())  # see _settle
        set_id(process_set, "DistributedOptimizer")  # a registered set (this rank may be outside)
        object.__setattr__(self, "_process_set", process_set)
        object.__setattr__(self, "_backward_passes_per_step",
                           check_passes(backward_passes_per_step))
        object.__setattr__(self, "_op", op)
        object.__setattr__(self, "_adasum", AdasumDeltas())
        object.__setattr__(self, "_samples", None)  # see take_samples
        self._start_accumulation()

    def _start_accumulation(self):
        # The count of passes and the parameters (a gluon.Trainer's, from param_dict) of
        # backward_passes_per_step > 1; not pickled: a loaded wrapper starts counting anew.
        k = self._backward_passes_per_step
        object.__setattr__(self, "_accumulation", None if k == 1 else Accumulation(
            getattr(self._optimizer, "param_dict", {}).values(), k, "gluon.Trainer"))

    # -- forwarding ---------------------------------------------------------------------
    def __getattribute__(self, name):
        if name.startswith("__") or name in DistributedOptimizer._LOCAL:
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_optimizer"), name)

    def __setattr__(self, name, value):
        if name in DistributedOptimizer._LOCAL:
            object.__setattr__(self, name, value)
            return
        if name == "param_dict" and self._accumulation is not None:
            # gluon.Trainer hands its parameters over here (Trainer.__init__, load_states):
            # their gradients must add up over the passes.
            self._accumulation.accumulate(value.values())
        setattr(self._optimizer, name, value)

    def __delattr__(self, name):
        if name in DistributedOptimizer._LOCAL:
            object.__delattr__(self, name)
        else:
            delattr(self._optimizer, name)

    # Pickled by Updater.get_states(dump_optimizer=True) (trainer/module checkpoints); the
    # wrapped optimizer pickles itself (without param_dict, which Trainer sets again).
    def __getstate__(self):
        state = {k: object.__getattribute__(self, k) for k in DistributedOptimizer._STATE}
        state["_device_id"] = 0
        return state

    def __setstate__(self, state):
        object.__setattr__(self, "_process_set", global_process_set)  # older pickles
        object.__setattr__(self, "_backward_passes_per_step", 1)
        object.__setattr__(self, "_op", Average)
        object.__setattr__(self, "_adasum", AdasumDeltas())
        object.__setattr__(self, "_samples", None)
        object.__setattr__(self, "_devices", {})
        object.__setattr__(self, "_settler", update_layout.Settler())
        for k, v in state.items():
            object.__setattr__(self, k, v)
        self._start_accumulation()
        # The set registered now with the pickled set's ranks (ProcessSet pickles as its
        # ranks; a pickle made before that carried the first session's id, which may name
        # another set now); the global set is the global set.
        ps = self._process_set
        if isinstance(ps, type(global_process_set)):
            ps = global_process_set
        elif isinstance(ps, ProcessSet) and ps.process_set_id is not None:
            ps = unpickle_set(ps.ranks)
        object.__setattr__(self, "_process_set", ps)

    def __repr__(self):
        return "DistributedOptimizer(%r)" % (self._optimizer,)

    def _set_current_context(self, device_id):
        # The Updater calls this before each update with the weight's device id. With
        # several contexts per rank each context's gradient is reduced under its own name;
        # the name carries the context's position among the contexts this rank has used
        # (first seen: 0), not the id itself: ranks that each train on their own device
        # (mx.cpu(local_rank), mx.gpu(local_rank)) must still agree on the names.
        devices = self._devices
        if device_id not in devices:
            devices[device_id] = len(devices)
        object.__setattr__(self, "_device_id", devices[device_id])
        self._optimizer._set_current_context(device_id)

    # -- the distributed part -----------------------------------------------------------
    def _reduction_settings(self):
        """The settings that decide this wrapper's collectives (names, factors), which every
        rank of its set must have alike (checked with the parameters by
        :mod:`mxhorovod.checks.layout_check` before the first reduction)."""
        return (("num_groups", max(0, self._num_groups)),
                ("gradient_predivide_factor", self._gradient_predivide_factor))

    def _name(self, index):
        if self._prefix is None:
            # Numbered per process set in the order wrappers first reduce (not creation
            # order): one made on some ranks only, over another set, or never used must not
            # shift the names of the ones every rank uses (mxhorovod.common.naming); two wrappers
            # in one process (a GAN) still never share a name.
            pid = check_member(self._process_set, "DistributedOptimizer")
            object.__setattr__(self, "_prefix", "DistributedOptimizer.%d."
                               % next_number("DistributedOptimizer", pid))
        name = "%s%s" % (self._prefix, index)
        if self._device_id:
            name += "@%d" % self._device_id
        return name

    def _do_allreduce(self, index, grad):
        ps = self._process_set
        if outside(ps):
            return  # a rank outside the set updates with its own gradients (as one process)
        n = size() if ps is global_process_set else set_size(ps, "DistributedOptimizer")
        if n == 1:
            return
        f = self._gradient_predivide_factor
        kwargs = dict(op=Average, prescale_factor=1.0 / f, postscale_factor=f, process_set=ps)
        if not isinstance(index, (tuple, list)):
            if grad.stype != "default":
                allreduce_row_sparse_(grad, self._name(index), **kwargs)
            else:
                allreduce_(grad, name=self._name(index), **kwargs)
            return
        if any(g.stype != "default" for g in grad):
            for i, g in zip(index, grad):
                if g.stype != "default":
                    allreduce_row_sparse_(g, self._name(i), **kwargs)
            index, grad = zip(*[(i, g) for i, g in zip(index, grad) if g.stype == "default"]) \
                if any(g.stype == "default" for g in grad) else ((), ())
            if not index:
                return
        if self._num_groups > 0:
            groups = zip(split_list(list(index), self._num_groups),
                         split_list(list(grad), self._num_groups))
            for indices, grads in groups:
                grouped_allreduce_(grads, name="%s:%s" % (self._name(indices[0]), indices[-1]),
                                   **kwargs)
        else:
            for i, g in zip(index, grad):
                allreduce_(g, name=self._name(i), **kwargs)

    def take_samples(self, pending, scale):
        """This step's batch sizes' allreduce (:mod:`mxhorovod.training.samples`),
        submitted by the patched ``gluon.Trainer.step`` / ``update`` or ``Module.update``
        (``scale``: the Trainer's ``_scale``, 1 for a Module); the first update of the step
        sets the wrapped optimizer's ``rescale_grad`` from it."""
        object.__setattr__(self, "_samples", (pending, scale))

    def _rescale_for_samples(self):
        got = self._samples
        if got is None:
            return
        object.__setattr__(self, "_samples", None)
        ps = self._process_set
        n = size() if ps is global_process_set else set_size(ps, "DistributedOptimizer")
        self._optimizer.rescale_grad = samples.rescale(got[0], got[1], n)

    def _check_accumulating(self):
        acc = self._accumulation
        if acc is not None and not acc.updating:
            raise ValueError(
                "DistributedOptimizer(backward_passes_per_step=%d) updates only inside "
                "gluon.Trainer.step / update or Module.update, which check the passes and "
                "zero the gradients after the update; it was called from elsewhere (an "
                "Updater of your own?)" % acc.passes)

    def _settle(self, index, weight):
        # NAG's and centered RMSProp's in-place updates give other bits on a weight that an
        # evaluation pass left in MKLDNN's layout, which depends on timing: after such a
        # pass, put back in the plain layout first, so every rank computes alike
        # (mxhorovod.training.update_layout).
        if update_layout.layout_sensitive(self._optimizer):
            ps = self._process_set
            if not outside(ps) and set_size(ps, "DistributedOptimizer") > 1:
                many = isinstance(weight, (list, tuple))
                keys = [(i, self._device_id) for i in (index if many else [index])]
                by_key = dict(zip(keys, weight if many else [weight]))
                self._settler.settle(keys, lambda stale: [by_key[k] for k in stale])

    def update(self, index, weight, grad, state):
        """Average ``grad`` (an NDArray or a list, matching ``index``) over ranks in place,
        then run the wrapped optimizer's ``update`` (on weights in the plain layout where
        the update depends on it: :mod:`mxhorovod.training.update_layout`)."""
        self._check_accumulating()
        self._rescale_for_samples()
        if self._adasum_here():
            self._settle(index, weight)
            self._adasum_update(self._optimizer.update, index, weight, grad, state)
            return
        with gradient_reduction():
            self._do_allreduce(index, grad)
        self._settle(index, weight)
        self._optimizer.update(index, weight, grad, state)

    def update_multi_precision(self, index, weight, grad, state):
        """Average ``grad`` over ranks in place, then run the wrapped optimizer's
        ``update_multi_precision`` (what ``mx.optimizer.Updater`` calls), as ``update``."""
        self._check_accumulating()
        self._rescale_for_samples()
        if self._adasum_here():
            self._settle(index, weight)
            self._adasum_update(self._optimizer.update_multi_precision, index, weight, grad,
                                state)
            return
        with gradient_reduction():
            self._do_allreduce(index, grad)
        self._settle(index, weight)
        self._optimizer.update_multi_precision(index, weight, grad, state)

    def _adasum_here(self):
        ps = self._process_set
        return self._op == Adasum and not outside(ps) and \
            set_size(ps, "DistributedOptimizer") > 1

    def _adasum_update(self, update, index, weight, grad, state):
        # The local step's change to each weight, combined over the ranks
        # (mxhorovod.training.adasum).
        many = isinstance(index, (list, tuple))
        pairs = [((i, self._device_id), w) for i, w in zip(index if many else [index],
                                                           weight if many else [weight])]
        self._adasum.before(pairs)
        try:
            update(index, weight, grad, state)
        finally:  # also when it raised: the peers wait for this rank's deltas
            self._adasum.after(pairs, lambda key: self._name(key[0]) + ".adasum",
                               self._process_set)



DistributedOptimizer._LOCAL = frozenset(vars(DistributedOptimizer)) | frozenset(
    DistributedOptimizer._STATE) | {"_devices", "_accumulation", "_settler", "_adasum",
                                    "_samples"}
# Trainer states files pickle the wrapper by its module path: the face mxhorovod.optimizer
# (the path 0.1.0 wrote and reads), not this module, so they load in 0.1.0 and survive
# moves of this code.
DistributedOptimizer.__module__ = "mxhorovod.optimizer"
