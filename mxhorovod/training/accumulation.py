"""Gradient accumulation for DistributedTrainer (``backward_passes_per_step``): counting the
backward passes of this process, and the accumulation each trainer owns.

MXNet has no hook on a parameter's gradient, so the passes are counted where they start:
``mx.autograd.backward`` and ``NDArray.backward`` (installed once by
:func:`mxhorovod.training.patches.install`). The count covers the whole process: in a
script with one model it is the model's passes; where several models train (a GAN), a
trainer's own passes are at most that count, so a ``step()`` that comes too early is still
refused whenever the process made fewer passes than asked.
"""
import functools
import threading

import mxnet as mx

__all__ = ["Accumulation", "install_backward_counter", "backward_passes"]

_passes = 0
_lock = threading.Lock()


def backward_passes():
    """The number of backward passes this process has started."""
    return _passes


def _counted(fn):
    @functools.wraps(fn)
    def backward(*args, **kwargs):
        global _passes
        with _lock:
            _passes += 1
        return fn(*args, **kwargs)
    backward._mxhorovod_counted = True
    return backward


def install_backward_counter():
    """Counts every ``mx.autograd.backward`` and ``NDArray.backward`` call. Idempotent."""
    if not getattr(mx.autograd.backward, "_mxhorovod_counted", False):
        mx.autograd.backward = _counted(mx.autograd.backward)
    if not getattr(mx.nd.NDArray.backward, "_mxhorovod_counted", False):
        mx.nd.NDArray.backward = _counted(mx.nd.NDArray.backward)


class Accumulation(object):
    """The gradients of a trainer's parameters summed over ``passes`` backward passes.

    Made with the trainer: parameters with ``grad_req='write'`` get ``'add'`` (the user's
    ``'add'`` stays; ``'null'`` stays). The trainer calls :meth:`check` before it reduces
    (``step``, ``allreduce_grads``, or ``update`` reducing first) and :meth:`done` after each
    update, which zeroes the gradients and starts the count again."""

    def __init__(self, params, passes):
        if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
            raise ValueError("backward_passes_per_step must be an int >= 1, got %r" % (passes,))
        self.passes = passes
        self.all_params = list(params)
        for p in self.all_params:
            if getattr(p, "_grad_stype", "default") != "default":
                raise ValueError(
                    "backward_passes_per_step=%d: parameter '%s' has a %s gradient, which "
                    "MXNet writes only (its sparse operators refuse grad_req='add'): "
                    "accumulate dense gradients, or use backward_passes_per_step=1"
                    % (passes, p.name, p._grad_stype))
            if p.grad_req == "write":
                p.grad_req = "add"  # re-creates the gradient arrays (zeros), before any use
        self.start = backward_passes()
        self.checked = False  # check() passed since the last update

    def params(self):
        """The parameters whose gradients this trainer uses now (grad_req may change)."""
        return [p for p in self.all_params if p.grad_req != "null"]

    def check(self, method):
        """Raises ValueError when fewer than ``passes`` backward passes ran since the last
        update, or when a parameter's gradient is written, not added (set after the
        trainer was made: it holds the last pass only)."""
        if self.checked:  # step() checks, then its allreduce_grads(): once per update
            return
        done = backward_passes() - self.start
        if done < self.passes:
            raise ValueError(
                "DistributedTrainer.%s: %d of the %d backward passes "
                "(backward_passes_per_step=%d) ran since the last update: %d missing. Run %d "
                "backward passes, then %s(batch_size) with batch_size the samples of all of "
                "them on this rank" % (method, done, self.passes, self.passes,
                                        self.passes - done, self.passes, method))
        written = [p.name for p in self.all_params if p.grad_req == "write"]
        if written:
            raise ValueError(
                "DistributedTrainer.%s: with backward_passes_per_step=%d the gradients must "
                "add up over the passes, but %s ha%s grad_req='write' (set after the trainer "
                "was made: unfrozen?), which keeps the last pass only. Set grad_req='add' "
                "instead" % (method, self.passes, ", ".join("'%s'" % w for w in written),
                             "s" if len(written) == 1 else "ve"))
        self.checked = True

    def done(self):
        """After an update: zero every gradient, count the passes anew."""
        for p in self.params():
            if p._grad is not None:
                p.zero_grad()
        self.start = backward_passes()
        self.checked = False
