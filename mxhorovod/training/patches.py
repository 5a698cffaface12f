"""Every patch of an MXNet class, installed once by ``import mxhorovod`` (:func:`install`).

Each patch wraps one method of ``gluon.Trainer``, ``mx.mod.Module`` or MXNet's kvstore
factory, and leaves every object it does not concern running MXNet's own code.
docs/design.md lists them, with what each changes and why. Hooks on single objects (bucket
views, deferred initialization) live with their feature, not here.

- ``mx.kv.create('horovod')`` and the string ``kvstore='horovod'`` give :class:`Horovod`
  (:func:`install_kvstore_alias`); its ``save_states`` makes no collective before the
  first step (:func:`install_local_save_states`).
- ``gluon.Trainer.step`` / ``update`` / ``allreduce_grads``: the ranks agree on fresh
  gradients, AMP overflow, batch sizes and the parameters they reduce, check that their
  parameters stay identical, and (over kvstore 'horovod') settle weight layouts before
  updates that depend on them, for a Trainer over kvstore 'horovod' or with a
  ``DistributedOptimizer`` (:func:`install_trainer_agreement`).
- ``gluon.Trainer.load_states`` keeps the Trainer's reduction (:func:`install_load_states`).
- ``mx.mod.Module.update`` with a ``DistributedOptimizer`` checks that the ranks reduce the
  same parameters (:func:`install_module_layout_check`).
- With a ``DistributedOptimizer(backward_passes_per_step=k)``, k > 1: ``gluon.Trainer.step``
  / ``update`` and ``Module.update`` check the passes before anything is sent and zero the
  gradients after the update (:func:`_accumulating`); ``Module.init_optimizer`` refuses a
  module bound with ``grad_req='write'`` (:func:`install_module_accumulation`). The
  backward passes are counted by :func:`install_backward_counter`.
- ``mx.autograd.set_training``, ``gluon.Parameter.data`` and ``Executor.forward`` count
  inference-mode forwards, after which NAG's updates settle the weights' layout first
  (:func:`mxhorovod.training.update_layout.install_inference_counter`).
"""
import contextlib
import functools
import weakref

import mxnet as mx
import mxnet.gluon.trainer
import mxnet.model
import mxnet.module.module

from mxhorovod.checks.agreement import (agreed_amp_overflow, mixed_freshness,
                                        zero_stale_where_fresh_elsewhere)
from mxhorovod.checks.batch_check import BatchSizeCheck
from mxhorovod.checks.layout_check import LayoutCheck, check_one_context, module_rows
from mxhorovod.checks.parameter_check import ParameterCheck
from mxhorovod.checks.unreduced import mark_reduced, needs_reduction, reduced_before_step, was_reduced
from mxhorovod.common.process_sets import global_process_set, outside, set_size
from mxhorovod.training.accumulation import install_backward_counter
from mxhorovod.collectives.ops import Adasum
from mxhorovod.training import samples, update_layout
from mxhorovod.training.kvstore import Horovod
from mxhorovod.training.optimizer import DistributedOptimizer
from mxhorovod.training.optimizer_state import counts_for_devices, install_optimizer

__all__ = ["install", "install_kvstore_alias", "install_local_save_states",
           "install_trainer_agreement", "install_load_states", "install_module_layout_check",
           "install_module_accumulation"]


def install():
    """Installs every patch of this module (each is idempotent)."""
    mx.kvstore.KVStoreBase.register(Horovod)
    install_kvstore_alias()
    install_local_save_states()
    install_trainer_agreement()
    install_load_states()
    install_module_layout_check()
    install_module_accumulation()
    install_backward_counter()
    update_layout.install_inference_counter()


# --- kvstore 'horovod' ---

def install_kvstore_alias():
    """Makes MXNet's ``_create_kvstore`` return the 'horovod' kvstore for the name
    'horovod' whatever the number of devices (see the module doc); other names unchanged.
    Idempotent."""
    original = mxnet.model._create_kvstore
    if getattr(original, "_mxhorovod_alias", False):
        return

    @functools.wraps(original)
    def _create_kvstore(kvstore, num_device, arg_params):
        if isinstance(kvstore, str) and kvstore.lower() == "horovod":
            # update_on_kvstore: False, since is_capable('optimizer') is False.
            return mx.kv.create("horovod"), False
        return original(kvstore, num_device, arg_params)

    _create_kvstore._mxhorovod_alias = True
    for module in (mxnet.model, mxnet.gluon.trainer, mxnet.module.module):
        if getattr(module, "_create_kvstore", None) is original:
            module._create_kvstore = _create_kvstore


def install_local_save_states():
    """Makes ``gluon.Trainer.save_states`` of a Trainer over kvstore 'horovod' make no
    collective. MXNet's save_states first creates the kvstore and initializes the
    parameters in it (``_init_kvstore``, ``_init_params``), which for this kvstore is the
    broadcast from rank 0 that the first ``step()`` would make. A script that saves
    checkpoints on rank 0 only (docs/kvstore.md) and does so before the first step (an epoch-0
    checkpoint) then broadcast on rank 0 alone: rank 0 waited for the others' broadcasts,
    the others for rank 0 in their first step, forever. The states this kvstore saves are
    the local updater's (the optimizer never runs on it: ``update_on_kvstore`` is False),
    so until the first step has initialized the kvstore they are written as MXNet would,
    without it; the first step then broadcasts on every rank, as before. Other Trainers are
    unchanged. Idempotent.
    """
    trainer_cls = mx.gluon.Trainer
    original = trainer_cls.save_states
    if getattr(original, "_mxhorovod_local", False):
        return

    @functools.wraps(original)
    def save_states(self, fname):
        config = getattr(self, "_kvstore_params", {})
        store = config.get("kvstore")
        ours = isinstance(store, Horovod) or (isinstance(store, str) and store.lower() == "horovod")
        if (not ours or config.get("update_on_kvstore") or self._optimizer is None
                or (self._kv_initialized and not self._params_to_init)):
            return original(self, fname)
        with open(fname, "wb") as fout:
            fout.write(self._updaters[0].get_states(dump_optimizer=True))

    save_states._mxhorovod_local = True
    trainer_cls.save_states = save_states


# --- backward_passes_per_step of a DistributedOptimizer ---

def _accumulating(target, method):
    """The update of a ``gluon.Trainer`` or ``Module`` whose optimizer is a
    ``DistributedOptimizer`` with ``backward_passes_per_step`` > 1, as a context: first the
    passes and the gradients' grad_req are checked (before any collective), then the
    wrapper reduces and updates, then every gradient is zeroed (:mod:`.accumulation`).
    Other Trainers and Modules: nothing."""
    opt = getattr(target, "_optimizer", None)
    acc = opt._accumulation if isinstance(opt, DistributedOptimizer) else None
    if acc is None:
        return contextlib.nullcontext()
    if not isinstance(target, mx.mod.Module):
        acc.owner = "gluon.Trainer"
        return acc.updating_after(method)
    acc.owner = "Module"
    group = getattr(target, "_exec_group", None)  # None: not bound (MXNet's update asserts)
    grads = [g for grads in group.grad_arrays for g in grads if g is not None] \
        if group is not None else []
    return acc.updating_after(method, written=_written_grads(target), fix=_BIND_ADD,
                              grads=grads)


_BIND_ADD = ("Bind the module with grad_req='add' (mod.bind(..., grad_req='add'), before "
             "init_params), and keep rescale_grad = 1.0 / (k * batch_size)")


def _written_grads(module):
    """The names of ``module``'s parameters whose gradients are written, not added."""
    group = getattr(module, "_exec_group", None)
    if group is None:
        return []
    return [n for n in group.param_names if group.grad_req.get(n) == "write"]


# --- gluon.Trainer: agreement across ranks ---

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
        if outside(ps):
            return None
        n = set_size(ps, "DistributedOptimizer")
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
    Trainer checks its batch size against the peers' (:mod:`mxhorovod.checks.batch_check`).
    Other Trainers run MXNet's code unchanged. Idempotent.
    """
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
        if agree is not None and isinstance(trainer._optimizer, DistributedOptimizer):
            return agreed_amp_overflow(trainer, agree[0] + ".overflow", agree[1])
        return contextlib.nullcontext()

    def check_batch_size(trainer, batch_size, method="step"):
        # Ranks passing different batch sizes update differently (mxhorovod.checks.batch_check).
        target = _agreement(trainer, "batch_size")
        if target is not None:
            check = vars(trainer).get("_mxhorovod_batch_check")
            if check is None:
                check = trainer._mxhorovod_batch_check = BatchSizeCheck("Trainer")
            # A DistributedOptimizer weights each rank by its batch size: sizes may differ.
            weighted = isinstance(trainer._optimizer, DistributedOptimizer)
            check.submit(None if weighted else batch_size, target[0], target[1], method,
                         trainer._optimizer)

    def submit_samples(trainer, batch_size, method):
        # With a DistributedOptimizer (not Adasum), more than one rank: each rank's batch
        # size in one small allreduce; the wrapper's first update of the step sets
        # rescale_grad from the total (mxhorovod.training.samples).
        opt = trainer._optimizer
        target = _agreement(trainer, "samples")
        if target is None or not isinstance(opt, DistributedOptimizer) or opt._op == Adasum:
            return False
        opt.take_samples(samples.submit(batch_size, target[0], target[1],
                                        "gluon.Trainer.%s" % method), trainer._scale)
        return True

    def check_layout(trainer):
        # Ranks reducing different parameters wait for each other forever: an error on
        # every rank instead (mxhorovod.checks.layout_check; blocking only when it changed).
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
            # Ranks checking their parameters at other updates would wait in that check.
            settings = (trainer._optimizer._reduction_settings() if wrapped else ()) + \
                (("MXHOROVOD_PARAMETER_CHECK_STEPS", parameter_check(trainer).steps),)
            check.check(trainer._params, target[0], target[1],
                        "Trainer with %s" % ("a DistributedOptimizer" if wrapped
                                             else "kvstore 'horovod'"),
                        settings,
                        contexts=len(trainer._contexts) if trainer._contexts else None)

    def parameter_check(trainer):
        check = vars(trainer).get("_mxhorovod_parameter_check")
        if check is None:
            check = trainer._mxhorovod_parameter_check = ParameterCheck()
        return check

    def check_parameters(trainer):
        # Are the ranks' weights still identical? Every N-th update, read two updates later
        # (mxhorovod.checks.parameter_check); after check_layout, which compares N.
        target = _agreement(trainer, "parameters")
        if target is not None:
            label = "Trainer with %s" % ("a DistributedOptimizer" if isinstance(
                trainer._optimizer, DistributedOptimizer) else "kvstore 'horovod'")
            parameter_check(trainer).step(trainer._params, target[0], target[1], label)

    def over_kvstore(trainer):  # kvstore 'horovod', more than one rank
        return not isinstance(trainer._optimizer, DistributedOptimizer) and \
            _agreement(trainer, "fresh") is not None

    def settle_layouts(trainer):
        # Over kvstore 'horovod' the optimizer runs here, on every rank: weights in the
        # plain layout for updates that depend on it (mxhorovod.training.update_layout). A
        # DistributedOptimizer does it itself (also under Module).
        if update_layout.layout_sensitive(trainer._optimizer) and over_kvstore(trainer):
            settler = vars(trainer).get("_mxhorovod_settler")
            if settler is None:
                settler = trainer._mxhorovod_settler = update_layout.Settler()
            params = trainer._params
            settler.settle([i for i, p in enumerate(params) if p.grad_req != "null"],
                           lambda keys: [params[i].list_data() for i in keys])

    @functools.wraps(original_step)
    def step(self, batch_size, ignore_stale_grad=False):
        with _accumulating(self, "step"):
            return stepped(self, batch_size, ignore_stale_grad)

    def stepped(self, batch_size, ignore_stale_grad):
        if was_reduced(self) and over_kvstore(self) and \
                reduced_before_step(self, "Trainer (kvstore 'horovod')"):
            return update(self, batch_size, ignore_stale_grad)  # summing again: size() x
        try:
            check_layout(self)
            check_batch_size(self, batch_size)
            agree = needed(self, ignore_stale_grad)
            if agree is not None and ignore_stale_grad:
                zero_stale_where_fresh_elsewhere(self._params, agree[0], agree[1])
            check_parameters(self)
            settle_layouts(self)
            weighted = submit_samples(self, batch_size, "step")
            with amp_context(self, agree):
                # The wrapper sets rescale_grad from every rank's batch size.
                return original_step(self, 1 if weighted else batch_size, ignore_stale_grad)
        finally:
            mark_reduced(self, False)  # also when it raised: the next update must reduce

    @functools.wraps(original_allreduce_grads)
    def allreduce_grads(self):
        original_allreduce_grads(self)
        mark_reduced(self)

    @functools.wraps(original_update)
    def update(self, batch_size, ignore_stale_grad=False):
        with _accumulating(self, "update"):
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
        check_parameters(self)
        settle_layouts(self)
        weighted = submit_samples(self, batch_size, "update")
        with amp_context(self, agree):
            return original_update(self, 1 if weighted else batch_size, ignore_stale_grad)

    step._mxhorovod_stale = update._mxhorovod_stale = True
    trainer_cls.step, trainer_cls.update = step, update
    trainer_cls.allreduce_grads = allreduce_grads


# --- gluon.Trainer.load_states keeps the reduction ---

def install_load_states():
    """Wraps ``mx.gluon.Trainer.load_states`` (and so ``DistributedTrainer``'s) as the
    module docstring says. Idempotent."""
    trainer_cls = mx.gluon.Trainer
    if getattr(trainer_cls.load_states, "_mxhorovod_keeps_reduction", False):
        return
    original = trainer_cls.load_states

    def load_states(self, fname):
        before = getattr(self, "_optimizer", None)
        original(self, fname)
        loaded = self._optimizer
        inner = loaded._optimizer if isinstance(loaded, DistributedOptimizer) else loaded
        # The file's update counts are under its writer's device ids (rank 0's cpu(0));
        # this rank's may differ (cpu(1)).
        counts_for_devices(inner, [ctx.device_id for ctx in self._contexts])
        if not isinstance(before, DistributedOptimizer):
            before = inner
        self._optimizer = before  # what install_optimizer keeps: the wrapper, if any
        install_optimizer(self, inner)  # also the updaters' batching, for the file's optimizer

    load_states.__doc__ = original.__doc__
    load_states.__wrapped__ = original
    load_states._mxhorovod_keeps_reduction = True
    trainer_cls.load_states = load_states


# --- mx.mod.Module.update with a DistributedOptimizer ---

_module_checks = weakref.WeakKeyDictionary()  # DistributedOptimizer -> its LayoutCheck
_module_parameter_checks = weakref.WeakKeyDictionary()  # ... -> its ParameterCheck


class _ModuleParameter(object):
    """A Module's parameter as :class:`ParameterCheck` reads one: name, grad_req, arrays."""
    __slots__ = ("name", "grad_req", "_arrays")

    def __init__(self, name, arrays, trained):
        self.name, self._arrays = name, arrays
        self.grad_req = "write" if trained else "null"

    def list_data(self):
        return self._arrays


def install_module_layout_check():
    """Wraps ``mx.mod.Module.update`` so that a Module training with a
    ``DistributedOptimizer`` (``kvstore=None``) checks, before its first update and
    whenever its parameters without gradients change (a new bind), that the ranks reduce
    the same parameters: ``fixed_param_names`` or a symbol that differ by rank hung every
    rank in the optimizer's allreduces. Checked once per optimizer (the modules of a
    BucketingModule share one) and again when the set of gradient-less parameters changes.
    With ``backward_passes_per_step`` > 1 the update runs inside :func:`_accumulating`.
    Other Modules run MXNet's code unchanged. Idempotent."""
    module_cls = mx.mod.Module
    if getattr(module_cls.update, "_mxhorovod_layout", False):
        return
    original = module_cls.update

    def update(self):
        opt = getattr(self, "_optimizer", None)
        group = getattr(self, "_exec_group", None)
        if isinstance(opt, DistributedOptimizer) and group is not None and \
                not getattr(self, "_update_on_kvstore", False) and \
                not outside(opt._process_set) and \
                set_size(opt._process_set, "DistributedOptimizer") > 1:
            # One check per optimizer, not per Module: a BucketingModule's modules share
            # the optimizer, and the ranks may be in different buckets at a step (a check
            # at each one's first update would wait for the peers alone).
            if getattr(self, "_kvstore", None) is None:
                check_one_context(getattr(self, "_context", None),
                                  "Module with a DistributedOptimizer")
            check = _module_checks.get(opt)
            if check is None:
                check = _module_checks[opt] = LayoutCheck()
            opt._name("layout")  # numbers the wrapper (its first reduction) if not yet
            quick = (len(group.param_names),
                     tuple(not g or g[0] is None for g in group.grad_arrays))
            weights = _module_parameter_checks.get(opt)
            if weights is None:
                weights = _module_parameter_checks[opt] = ParameterCheck()
            # Ranks checking their parameters at other updates would wait in that check.
            check.check_rows(quick, lambda: module_rows(group), opt._prefix + "layout",
                             opt._process_set, "Module with a DistributedOptimizer",
                             opt._reduction_settings() +
                             (("MXHOROVOD_PARAMETER_CHECK_STEPS", weights.steps),))
            # Are the ranks' weights still identical? (mxhorovod.checks.parameter_check)
            if weights.steps:
                params = [_ModuleParameter(name, arrays, bool(grads) and grads[0] is not None)
                          for name, arrays, grads in zip(group.param_names, group.param_arrays,
                                                         group.grad_arrays)]
                weights.step(params, opt._prefix + "parameters", opt._process_set,
                             "Module with a DistributedOptimizer")
            if opt._op != Adasum:
                # Each rank's samples, 1 / rescale_grad, in one small allreduce: the update
                # uses the mean over the samples processed; the Module's rescale_grad is
                # restored after it (mxhorovod.training.samples).
                mine = opt._optimizer.rescale_grad
                value = 1.0 / mine if mine and 0 < mine < float("inf") else float("nan")
                opt.take_samples(samples.submit(value, opt._prefix + "samples",
                                                opt._process_set, "Module.update"), 1.0)
                try:
                    return original(self)
                finally:
                    opt._samples = None
                    opt._optimizer.rescale_grad = mine
        return original(self)

    def accumulated_update(self):
        # backward_passes_per_step: the passes are checked before the layout check's
        # collective, the gradients zeroed after the update.
        with _accumulating(self, "update"):
            return update(self)

    accumulated_update = functools.wraps(original)(accumulated_update)
    accumulated_update._mxhorovod_layout = True
    module_cls.update = accumulated_update


def install_module_accumulation():
    """Wraps ``mx.mod.Module.init_optimizer``: a ``DistributedOptimizer`` with
    ``backward_passes_per_step`` > 1 given to a Module bound with ``grad_req='write'`` is
    refused there, at once, rather than at the update after the user's first k passes
    (MXNet fixes grad_req when it binds the executors). Other calls run MXNet's code
    unchanged. Idempotent."""
    module_cls = mx.mod.Module
    original = module_cls.init_optimizer
    if getattr(original, "_mxhorovod_accumulation", False):
        return

    @functools.wraps(original)
    def init_optimizer(self, kvstore="local", optimizer="sgd",
                       optimizer_params=(("learning_rate", 0.01),), force_init=False):
        acc = optimizer._accumulation if isinstance(optimizer, DistributedOptimizer) else None
        written = _written_grads(self) if acc is not None else []
        if written:
            raise ValueError(
                "Module.init_optimizer: DistributedOptimizer(backward_passes_per_step=%d) "
                "adds the gradients up over the passes, but the module was bound with "
                "grad_req='write' (%s), which keeps the last pass only. %s"
                % (acc.passes, ", ".join("'%s'" % w for w in written[:4]) +
                   (", ..." if len(written) > 4 else ""), _BIND_ADD))
        return original(self, kvstore, optimizer, optimizer_params, force_init)

    init_optimizer._mxhorovod_accumulation = True
    module_cls.init_optimizer = init_optimizer
