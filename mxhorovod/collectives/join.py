"""``hvd.join()``: a rank out of data waits while the others finish their steps.

Horovod's semantics (PyTorch and TensorFlow's ``hvd.join``), for MXNet.
"""
import contextlib

import mxnet as mx

import mxhorovod._core as _core

__all__ = ["join", "after_join", "identity_when_joined"]

_after_join = []  # callables run after each join() returns (the checks realign)


def after_join(fn):
    """Run ``fn()`` after every ``join()`` of this process has returned (every rank then
    stands at the same point)."""
    _after_join.append(fn)


@contextlib.contextmanager
def identity_when_joined():
    """The Min, Max and Product allreduces called in this block on this thread take joined
    ranks, which add the op's identity (-inf for Max, +inf for Min, 1 for Product; the
    extremes for integers). For mxhorovod's own checks: a user's Max fails while a rank is
    joined, as in Horovod."""
    _core.set_join_identity(True)
    try:
        yield
    finally:
        _core.set_join_identity(False)


def join():
    """Declare this rank out of data and wait until every rank has called ``join()``.

    Call it when this rank's data ends before the others' (uneven shards), typically once
    per epoch, after the training loop.
    It first waits for this rank's own work queued in MXNet's engine (``mx.nd.waitall()``):
    collectives already called are submitted before the join.
    While this rank waits, the other ranks go on training:

    - their ``Sum`` and ``Average`` allreduces (single, grouped, in place, of
      ``DistributedTrainer`` and ``DistributedOptimizer``) run with this rank adding zeros.
      ``Average`` still divides by ``hvd.size()``, as in Horovod;
      ``DistributedTrainer`` and ``DistributedOptimizer`` scale for the ranks that
      contributed (see their ``step``).
    - their other collectives (allgather, broadcast, alltoall, reducescatter, allreduces
      with ``Min``, ``Max``, ``Product``) fail with an error that names the joined ranks:
      zeros would make them wrong.

    It is global: every rank of the job must call it, and a process set's collectives do
    not count a joined rank (a set with a joined member waits, as Horovod's do).

    A joined rank misses the updates its peers make meanwhile: after ``join()``, broadcast
    the parameters (and optimizer state) from the rank it returns, which made them all::

        last = hvd.join()
        hvd.broadcast_parameters(net.collect_params(), root_rank=last)
        hvd.broadcast_optimizer_state(trainer, root_rank=last)

    Returns:
        int: the rank that joined last, the same on every rank.

    Raises:
        ValueError: another ``join()`` of this rank is still waiting (from another thread).
        RuntimeError: mxhorovod is not initialized, or stopped while waiting (a peer's
            shutdown or failure).
    """
    mx.nd.waitall()
    last = _core.join()
    for fn in _after_join:
        fn()
    return last
