"""Gradient accumulation (``backward_passes_per_step``): counting the backward passes of
this process, and the accumulation that a ``DistributedTrainer`` or a
``DistributedOptimizer`` owns.

MXNet has no hook on a parameter's gradient, so the passes are counted where they start:
``mx.autograd.backward``, ``NDArray.backward`` (Gluon), ``Executor.backward``,
``Module.backward`` and ``SequentialModule.backward`` (the Module API), installed once by
:func:`mxhorovod.training.patches.install`. A call made inside another counted one (a
Module's backward runs one ``Executor.backward`` per context) is part of its pass, not a
pass of its own. The count covers the whole process: in a script with one model it is the
model's passes; where several models train (a GAN), a trainer's own passes are at most that
count, so a ``step()`` that comes too early is still refused whenever the process made fewer
passes than asked.
"""
import contextlib
import functools
import threading

import mxnet as mx

__all__ = ["Accumulation", "check_passes", "install_backward_counter", "backward_passes"]

_passes = 0
_lock = threading.Lock()
_inside = threading.local()  # .depth: counted backward calls running in this thread


def backward_passes():
    """The number of backward passes this process has started."""
    return _passes


def _counted(fn):
    @functools.wraps(fn)
    def backward(*args, **kwargs):
        global _passes
        depth = getattr(_inside, "depth", 0)
        if not depth:  # the outermost call is the pass; the calls it makes are its parts
            with _lock:
                _passes += 1
        _inside.depth = depth + 1
        try:
            return fn(*args, **kwargs)
        finally:
            _inside.depth = depth
    backward._mxhorovod_counted = True
    return backward


def install_backward_counter():
    """Counts the backward passes (see the module doc). Idempotent."""
    if not getattr(mx.autograd.backward, "_mxhorovod_counted", False):
        mx.autograd.backward = _counted(mx.autograd.backward)
    for cls in (mx.nd.NDArray, mx.executor.Executor, mx.mod.Module, mx.mod.SequentialModule):
        if not getattr(cls.backward, "_mxhorovod_counted", False):
            cls.backward = _counted(cls.backward)


def check_passes(passes):
    """``passes`` if it is an int >= 1 (a bool is not); else ValueError."""
    if isinstance(passes, bool) or not isinstance(passes, int) or passes < 1:
        raise ValueError("backward_passes_per_step must be an int >= 1, got %r" % (passes,))
    return passes


class Accumulation(object):
    """The gradients summed over ``passes`` backward passes, for one trainer or optimizer.

    ``owner`` names it in errors (``'DistributedTrainer'``, ``'gluon.Trainer'``,
    ``'Module'``). The Gluon parameters it is given (now, or later through :meth:`accumulate`)
    with ``grad_req='write'`` get ``'add'`` (the user's ``'add'`` stays; ``'null'`` stays).
    The owner calls :meth:`check` before it reduces (``step``, ``allreduce_grads``, or
    ``update``) and :meth:`done` after each update, which zeroes the gradients and starts
    the count again; or runs the update inside :meth:`updating_after`."""

    def __init__(self, params, passes, owner="DistributedTrainer"):
        self.passes = check_passes(passes)
        self.owner = owner
        self.all_params = []
        self.accumulate(params)
        self.start = backward_passes()
        self.checked = False  # check() passed since the last update
        self.updating = False  # inside updating_after()

    def accumulate(self, params):
        """Makes ``params`` (Gluon parameters) the ones whose gradients add up: their
        gradients must be dense, and ``'write'`` becomes ``'add'``."""
        params = list(params)
        for p in params:
            if getattr(p, "_grad_stype", "default") != "default":
                raise ValueError(
                    "backward_passes_per_step=%d: parameter '%s' has a %s gradient, which "
                    "MXNet writes only (its sparse operators refuse grad_req='add'): "
                    "accumulate dense gradients, or use backward_passes_per_step=1"
                    % (self.passes, p.name, p._grad_stype))
        for p in params:
            if p.grad_req == "write":
                p.grad_req = "add"  # re-creates the gradient arrays (zeros), before any use
        self.all_params = params

    def params(self):
        """The parameters whose gradients are used now (grad_req may change)."""
        return [p for p in self.all_params if p.grad_req != "null"]

    def check(self, method, written=None,
              fix="It was set after the accumulation began (unfrozen?): set grad_req='add' "
                  "instead"):
        """Raises ValueError when fewer than ``passes`` backward passes ran since the last
        update, or when a gradient is written, not added: ``written``, the names of such
        gradients, by default the parameters with ``grad_req='write'`` (set after the
        accumulation began: such a gradient holds the last pass only); ``fix`` says what
        to do about them."""
        if self.checked:  # step() checks, then its allreduce_grads(): once per update
            return
        done = backward_passes() - self.start
        if done < self.passes:
            raise ValueError(
                "%s.%s: %d of the %d backward passes (backward_passes_per_step=%d) ran "
                "since the last update: %d missing. Run %d backward passes, then %s"
                % (self.owner, method, done, self.passes, self.passes, self.passes - done,
                   self.passes, "update(), with rescale_grad 1/(%d * batch_size)" % self.passes
                   if self.owner == "Module" else "%s(batch_size) with batch_size the "
                   "samples of all of them on this rank" % method))
        if written is None:
            written = [p.name for p in self.all_params if p.grad_req == "write"]
        if written:
            raise ValueError(
                "%s.%s: with backward_passes_per_step=%d the gradients must add up over the "
                "passes, but %s ha%s grad_req='write', which keeps the last pass only. %s"
                % (self.owner, method, self.passes, ", ".join("'%s'" % w for w in written),
                   "s" if len(written) == 1 else "ve", fix))
        self.checked = True

    def done(self, grads=()):
        """After an update: zero every gradient (the parameters', and ``grads``, a list of
        NDArrays), count the passes anew."""
        for p in self.params():
            if p._grad is not None:
                p.zero_grad()
        for g in grads:
            g[:] = 0
        self.start = backward_passes()
        self.checked = False

    @contextlib.contextmanager
    def updating_after(self, method, written=None, fix=None, grads=()):
        """:meth:`check`, then the body with :attr:`updating` true, then :meth:`done` (not
        when the body raised: the sum stays for a second try)."""
        self.check(method, written, *(() if fix is None else (fix,)))
        self.updating = True
        try:
            yield
        finally:
            self.updating = False
        self.done(grads)
