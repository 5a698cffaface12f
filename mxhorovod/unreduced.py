"""``update()`` without ``allreduce_grads()``: the gradients are reduced there instead.

MXNet's Trainer documents ``allreduce_grads()`` then ``update()`` for code that changes the
gradients between the two (gradient clipping). In a single-process script on one device
``allreduce_grads()`` does nothing, so scripts often call ``update()`` alone; ported to
``DistributedTrainer`` (or a ``gluon.Trainer`` over kvstore 'horovod'), each rank then
updated with its own gradient and the ranks' weights drifted apart without a word (as in
Horovod 0.28.1). Now ``update()`` reduces the gradients itself when ``allreduce_grads()``
has not run since the last ``update()`` / ``step()``, and warns once per trainer: whatever
was done to the gradients before (clipping) saw this rank's gradient alone.

The state is one attribute of the trainer (``_mxhorovod_reduced``): set by
``allreduce_grads()``, cleared by ``update()`` and ``step()`` (which reduces by itself).
A ``gluon.Trainer`` with a ``DistributedOptimizer`` needs none of this: its optimizer
reduces in ``update()``.
"""
import warnings

_FLAG = "_mxhorovod_reduced"


def mark_reduced(trainer, reduced=True):
    """Records that the trainer's gradients were (True) or were not yet (False) reduced
    since its last update."""
    setattr(trainer, _FLAG, reduced)


def needs_reduction(trainer, label, how="averaged"):
    """True when ``update()`` must reduce the gradients itself (``allreduce_grads()`` has
    not run since the last update); the first time per trainer, a ``UserWarning`` naming
    ``label`` (the trainer's kind) and ``how`` it reduces, on every rank that calls it so."""
    if getattr(trainer, _FLAG, False):
        return False
    if not getattr(trainer, "_mxhorovod_warned_unreduced", False):
        trainer._mxhorovod_warned_unreduced = True
        warnings.warn(
            "%s.update() was called without allreduce_grads() since the last update: the "
            "gradients are %s over the ranks here, in update() (updating each rank with "
            "its own gradient would drift the ranks' weights apart). Whatever was done to "
            "the gradients after backward (gradient clipping) saw this rank's gradient "
            "alone: call trainer.allreduce_grads() before it, then update(), as in MXNet's "
            "Trainer documentation; or call step()." % (label, how),
            UserWarning, stacklevel=3)  # the caller of update()
    return True
