"""``update()`` without ``allreduce_grads()``: the gradients are reduced there instead.

When ``allreduce_grads()`` has not run since the last ``update()`` / ``step()``,
``update()`` of a ``DistributedTrainer`` or of a ``gluon.Trainer`` over kvstore 'horovod'
reduces the gradients itself and warns once per trainer: what was done to them before
(clipping) saw this rank's gradient alone.
Over kvstore 'horovod', ``step()`` after ``allreduce_grads()`` updates without reducing
again, and warns once; ``DistributedTrainer`` reduces again (averaging equal gradients
changes nothing).
The state is one attribute of the trainer (``_mxhorovod_reduced``): set by
``allreduce_grads()``, cleared by ``update()`` and ``step()``, also when they raise.
A ``gluon.Trainer`` with a ``DistributedOptimizer`` needs none of this: its optimizer
reduces in ``update()``.
"""
from mxhorovod.common.user_warning import warn_user

_FLAG = "_mxhorovod_reduced"


def mark_reduced(trainer, reduced=True):
    """Records that the trainer's gradients were (True) or were not yet (False) reduced
    since its last update."""
    setattr(trainer, _FLAG, reduced)


def was_reduced(trainer):
    """Whether ``allreduce_grads()`` ran since the trainer's last update."""
    return getattr(trainer, _FLAG, False)


def reduced_before_step(trainer, label):
    """``step()`` right after ``allreduce_grads()`` on a trainer that sums (kvstore
    'horovod'): in one process the call does nothing, here ``step()`` would sum the summed
    gradients again (``size()`` times too large). Returns True (the caller then updates
    without reducing, as ``update()`` does) and warns once per trainer."""
    if not getattr(trainer, "_mxhorovod_warned_reduced_step", False):
        trainer._mxhorovod_warned_reduced_step = True
        warn_user(
            "%s.step() was called after allreduce_grads(): the gradients were summed over "
            "the ranks already, and step() would sum them again (size() times too large); "
            "it updates without reducing, as update() does. Call update() after "
            "allreduce_grads(), or step() alone." % label)
    return True


def needs_reduction(trainer, label, how="averaged"):
    """True when ``update()`` must reduce the gradients itself (``allreduce_grads()`` has
    not run since the last update); the first time per trainer, a ``UserWarning`` naming
    ``label`` (the trainer's kind) and ``how`` it reduces, on every rank that calls it so."""
    if getattr(trainer, _FLAG, False):
        return False
    if not getattr(trainer, "_mxhorovod_warned_unreduced", False):
        trainer._mxhorovod_warned_unreduced = True
        warn_user(
            "%s.update() was called without allreduce_grads() since the last update: the "
            "gradients are %s over the ranks here, in update() (updating each rank with "
            "its own gradient would drift the ranks' weights apart). Whatever was done to "
            "the gradients after backward (gradient clipping) saw this rank's gradient "
            "alone: call trainer.allreduce_grads() before it, then update(), as in MXNet's "
            "Trainer documentation; or call step()." % (label, how))
    return True
