"""``gluon.Trainer.load_states`` keeps the reduction the Trainer was made with.

``Trainer.save_states`` pickles the optimizer with its states (``Updater.get_states(
dump_optimizer=True)``), and MXNet's ``load_states`` puts the pickled optimizer in place of
the Trainer's. For a distributed Trainer that swapped how the gradients are reduced along
with the optimizer's state, depending on where the file came from:

- states saved by a ``DistributedTrainer`` or by a single-process run (a plain optimizer),
  loaded into a ``gluon.Trainer`` with a ``DistributedOptimizer``: the wrapper was dropped,
  the ranks updated with their own gradients and drifted apart, without an error;
- states saved by a ``gluon.Trainer`` with a ``DistributedOptimizer``, loaded into a
  ``DistributedTrainer`` (which reduces itself) or a Trainer over kvstore 'horovod': the
  gradients were reduced twice (right numbers, twice the communication), and into a plain
  Trainer of a single-process run: its first step needed ``hvd.init()``.

:func:`install_load_states` wraps ``load_states`` so that the file gives the optimizer
(its class, hyperparameters, update counts) and its states, and the Trainer keeps its
reduction: a Trainer made with a ``DistributedOptimizer`` keeps that wrapper (its process
set, ``num_groups``, ``gradient_predivide_factor`` and collective names) around the loaded
optimizer; any other Trainer gets the loaded optimizer without a wrapper.
"""
import mxnet as mx

__all__ = ["install_load_states"]


def install_load_states():
    """Wraps ``mx.gluon.Trainer.load_states`` (and so ``DistributedTrainer``'s) as the
    module docstring says. Idempotent."""
    from mxhorovod.optimizer import DistributedOptimizer
    trainer_cls = mx.gluon.Trainer
    if getattr(trainer_cls.load_states, "_mxhorovod_keeps_reduction", False):
        return
    original = trainer_cls.load_states

    def load_states(self, fname):
        before = getattr(self, "_optimizer", None)
        original(self, fname)
        loaded = self._optimizer
        inner = loaded._optimizer if isinstance(loaded, DistributedOptimizer) else loaded
        if isinstance(before, DistributedOptimizer):
            object.__setattr__(before, "_optimizer", inner)
            final = before
        else:
            final = inner
        if final is loaded:
            return
        self._optimizer = final
        for updater in getattr(self, "_updaters", None) or ():
            updater.optimizer = final
        kv_updater = getattr(getattr(self, "_kvstore", None), "_updater", None)
        if self._update_on_kvstore and kv_updater is not None:
            kv_updater.optimizer = final
        final.param_dict = {i: param for i, param in enumerate(self._params)}

    load_states.__doc__ = original.__doc__
    load_states.__wrapped__ = original
    load_states._mxhorovod_keeps_reduction = True
    trainer_cls.load_states = load_states
