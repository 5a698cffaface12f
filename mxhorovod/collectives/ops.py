"""Collectives on MXNet NDArrays: allreduce, broadcast, allgather, alltoall, reducescatter
and their grouped forms, each pushed into MXNet's dependency engine.

Every call takes ``process_set`` (default: every rank; "rank" and "size" are then the
set's); a rank outside the set gets ValueError.
Every call returns at once (allgather and alltoall first wait for the peers' sizes); a
later read of the output waits for the collective, which runs after the input's last write.
Ranks match calls by ``name``, unnamed ones by number per kind and process set in call
order; the n-th call of a name meets the peers' n-th, after the previous one completed.
Bad input (dtype, storage, shape, op, not initialized) raises ``ValueError`` at the call
(``TypeError`` for a non-NDArray, or a non-integer ``root_rank`` or ``priority``); the call
is still submitted as failed, so the peers fail naming this rank instead of waiting.
Ranks that disagree (shape, dtype, op, root, factors) or a peer that shut down raise
``mxnet.base.MXNetError`` at the next wait on the output, on every rank involved, naming
the tensor and the ranks' values; under MXNet's NaiveEngine, at the call.
A failed call (a grouped call fails whole) fills its float outputs, in-place ones included,
with NaN; integer outputs, and an in-place broadcast root's own array, keep their contents.
Supported: CPU NDArrays of default storage; float16, float32, float64, uint8, int8, int32,
int64. 0-d arrays exist only as ``mx.np`` arrays under ``npx.set_np()``.
"""

from mxhorovod.collectives import autograd
from mxhorovod.collectives.submit import (  # noqa: F401 (the rest of the public collectives)
    Adasum, Average, Max, Min, Product, Sum, allreduce_, allreduce_plain, alltoall_plain,
    broadcast_, broadcast_plain, differentiable, gradient_reduction, grouped_allgather,
    grouped_allreduce, grouped_allreduce_, grouped_reducescatter, recording)
from mxhorovod.common.process_sets import global_process_set

__all__ = [
    "Average", "Sum", "Adasum", "Min", "Max", "Product",
    "allreduce", "allreduce_", "grouped_allreduce", "grouped_allreduce_",
    "broadcast", "broadcast_", "allgather", "grouped_allgather", "alltoall", "reducescatter",
    "grouped_reducescatter", "gradient_reduction",
]


def allreduce(tensor, average=None, name=None, priority=0, prescale_factor=1.0,
              postscale_factor=1.0, process_set=global_process_set, op=None):
    """Reduce ``tensor`` over all ranks into a new NDArray.

    output = op over ranks r of (prescale_factor * tensor_r), times postscale_factor; for
    Average the sum is divided by size() (integers truncate toward zero, as in Horovod).

    Args:
        tensor: NDArray, same shape and dtype on every rank.
        average: deprecated; True means op=Average, False op=Sum.
        name: matches the call across ranks (converted with str()).
        priority: passed to MXNet's engine (Horovod's signature); it orders nothing
            here: the collective is an asynchronous engine operation that starts as soon as
            the last write to ``tensor`` completes (at the call if there is none), so
            collectives start in the order their inputs become ready.
        prescale_factor: multiplies each rank's tensor before the reduction.
        postscale_factor: multiplies the result after it.
        op: hvd.Average (default), hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max or hvd.Product.
            Adasum: the ranks' tensors combined in pairs along a binary tree in rank order
            (docs/collectives.md); float16/32/64 only, without scale factors.
        process_set: the ranks that take part (default: all).
    Returns:
        A new NDArray with tensor's shape, dtype and context, ready when read; the same
        values on every rank of ``process_set``. Dtypes: float16, float32, float64, uint8,
        int8, int32, int64, on CPU.
    Raises:
        InvalidArgumentError: at the call, on this rank: an unsupported dtype or storage
            (row_sparse), hvd.Adasum with a scale factor or an integer tensor, a rank
            outside ``process_set``, or a call before ``init()`` (a ``ValueError``).
        mxnet.base.MXNetError: at the next read of the result, on every rank, when the
            ranks passed different shapes, dtypes, ops or scale factors (the message names
            the tensor and both ranks' values), or when the call failed on another rank.
    """
    if recording() and differentiable(tensor):
        return autograd.allreduce(tensor, average, name, priority, prescale_factor,
                                      postscale_factor, op, process_set)
    return allreduce_plain(tensor, None, average, name, priority, prescale_factor,
                           postscale_factor, op, process_set, "allreduce")


def broadcast(tensor, root_rank, name=None, priority=0, process_set=global_process_set):
    """A new NDArray holding root_rank's ``tensor`` on every rank.

    ``tensor`` must have the same shape and dtype on every rank (its values on the other
    ranks are ignored). Waits for the local writes of ``tensor`` first, so a weight that an
    inference-mode forward pass keeps in MKLDNN's layout is read correctly.

    Args:
        root_rank: the sending rank: a rank of the job (``hvd.rank()`` numbering, as in
            Horovod), which must be a member of ``process_set``.
    Raises:
        ValueError: root_rank is not a member of ``process_set``.
        TypeError: root_rank or priority not an integer (a float is not truncated).
    """
    if recording() and differentiable(tensor):
        return autograd.broadcast(tensor, root_rank, name, priority, process_set)
    return broadcast_plain(tensor, None, root_rank, name, priority, process_set, "broadcast")


def allgather(tensor, name=None, priority=0, process_set=global_process_set):
    """Concatenate every rank's ``tensor`` along dimension 0, in rank order.

    Dimension 0 may differ per rank; the other dimensions and the dtype must agree. Blocks
    until every rank has called it with this name (the output's size depends on the
    peers), then returns a new NDArray of shape ``(sum of dim 0, *tensor.shape[1:])``.

    Raises:
        InvalidArgumentError (a ValueError and an MXNetError): on every rank, at the call,
            when a rank passed a 0-d array or the ranks disagree on the dtype or the
            dimensions after the first (the message names the tensor and two ranks'
            layouts); nothing is submitted.
    """
    if recording() and differentiable(tensor):
        return autograd.allgather(tensor, name, priority, process_set)
    return grouped_allgather([tensor], name=name, priority=priority, process_set=process_set,
                             _what="allgather")[0]


def alltoall(tensor, splits=None, name=None, priority=0, process_set=global_process_set):
    """Scatter slices of ``tensor`` to every rank and gather the slices they send.

    Rows [sum(splits[:r]), sum(splits[:r+1])) go to rank r. Without ``splits`` dimension 0
    must divide evenly by size(). Blocks until every rank has sent its splits.

    Args:
        splits: 1-D integer NDArray (int32, as Horovod makes it, or another integer
            dtype), numpy array or list, with size() entries, sum <= dim 0.
    Returns:
        The received rows concatenated in rank order; with ``splits`` given, a tuple
        (output, received_splits) where received_splits is an int32 NDArray of size().
    Raises:
        ValueError: splits not 1-D integers, wrong number of entries, negative, sum larger
            than dim 0, or dim 0 not divisible by size() without splits.
    """
    if recording() and differentiable(tensor):
        return autograd.alltoall(tensor, splits, name, priority, process_set)
    return alltoall_plain(tensor, splits, name, priority, process_set)


def reducescatter(tensor, op=Average, name=None, priority=0, process_set=global_process_set,
                  prescale_factor=1.0, postscale_factor=1.0):
    """Reduce ``tensor`` over the ranks and give each rank one block of dimension 0.

    Every rank passes the same shape (n, ...). Rank r receives rows
    [sum_{q<r} rows_q, ... + rows_r) of op over ranks of (prescale_factor * tensor), times
    postscale_factor (Average: divided by size), where rows_r = n // size + (r < n % size):
    an even split with the lower ranks taking the remainder (Horovod's rule).

    Args:
        tensor: NDArray with at least one dimension, same shape and dtype on every rank.
        op: hvd.Average (default) or hvd.Sum.
    Returns:
        A new NDArray of shape (rows_r, *tensor.shape[1:]).
    Raises:
        ValueError: a 0-d array, or an op other than Sum and Average.
    """
    if recording() and differentiable(tensor):
        return autograd.reducescatter(tensor, op, name, priority, process_set,
                                          prescale_factor, postscale_factor)
    return grouped_reducescatter([tensor], op=op, name=name, priority=priority,
                                 process_set=process_set, prescale_factor=prescale_factor,
                                 postscale_factor=postscale_factor, _what="reducescatter")[0]
