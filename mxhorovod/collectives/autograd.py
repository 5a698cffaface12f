"""Collectives that MXNet's autograd differentiates: ``hvd.allreduce``, ``allgather``,
``broadcast``, ``alltoall`` and ``reducescatter`` called inside ``autograd.record()`` on a
floating-point NDArray.

Each such call is an ``mx.autograd.Function`` whose backward runs the transposed collective
on every rank of the set, named after the forward (or its automatic name) plus ``'.grad'``:

- allreduce ``Sum`` / ``Average`` (with ``prescale_factor`` ``a`` and ``postscale_factor``
  ``b``): the upstream gradients reduced with the same op and factors.
- allgather: the upstream gradients summed over the ranks, then this rank's rows.
- broadcast: the root gets the upstream gradients summed over the ranks, the others zero.
- reducescatter ``Sum`` / ``Average``: the ranks' upstream gradients gathered, times
  ``a * b`` (and ``1 / size`` for Average).
- alltoall: the upstream gradients sent back along the received splits (zero for the rows
  past ``sum(splits)``).

That is the gradient of the sum of every rank's loss (Horovod's PyTorch binding averages
for allgather and broadcast). Not recorded, so constants to autograd: ``Adasum``, ``Min``,
``Max`` and ``Product`` allreduces, integer tensors, in-place and grouped calls.
Every rank whose loss depends on the output must run backward: its collective waits for the
others.
"""
import contextlib
import operator

import mxnet as mx
import numpy as np

from mxhorovod.collectives import submit
from mxhorovod.collectives.submit import Average, Sum
from mxhorovod.common.process_sets import set_id, set_size
from mxhorovod.common.state import topology

__all__ = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter"]


def _op_code(op, average):
    """The op a reduction will use, or None when the call's own checks will refuse it."""
    if average is not None:
        return Average if average else Sum
    if op is None:
        return Average
    try:
        return operator.index(op)
    except TypeError:
        return None


def _zeros_like(t):
    if isinstance(t, mx.np.ndarray):
        return mx.np.zeros(t.shape, dtype=t.dtype, ctx=t.context)
    return mx.nd.zeros(t.shape, ctx=t.context, dtype=t.dtype)


class _Collective(mx.autograd.Function):
    """One recorded collective: ``run`` gives the forward output, ``transpose`` maps the
    upstream gradient to the input's gradient (both called with autograd paused)."""

    def __init__(self, run, transpose, refuse, elementwise=False):
        super(_Collective, self).__init__()
        self._run, self._transpose, self._refuse = run, transpose, refuse
        self._elementwise = elementwise  # allreduce, broadcast: any shape, the output's
        self._empty = None  # a 0-size output (mx.np only): its shape, dtype, context
        self._np = False  # an mx.np input (set by forward)

    def __call__(self, x):
        # MXNet hands backward its gradients as legacy NDArrays, in which shape () means
        # "unknown": a 0-d mx.np input (a scalar loss under npx.set_np) failed in backward
        # ("_copyto inferring shapes failed"). The Function sees it as shape (1,).
        scalar = self._elementwise and x.ndim == 0
        if scalar:
            x = x.reshape((1,))
        elif x.grad is not None:
            # A leaf (attach_grad, a Parameter's data): MXNet's Function drops the gradient
            # of an input whose grad_req is 'add' (its backward_entry compares the request,
            # an int, with the string 'add'), so gradient accumulation silently got nothing.
            # Through a recorded identity, the leaf's gradient is an ordinary op's to add.
            x = x * 1
        try:
            y = super(_Collective, self).__call__(x)
        except BaseException:
            # Function.__call__ pauses recording around forward and does not restore it
            # when forward raises (a call refused at the call): the rest of the caller's
            # record() block must still record.
            mx.autograd.set_recording(True)
            raise
        return y.reshape(()) if scalar else y

    def forward(self, x):
        y = self._run(x)
        self._np = isinstance(x, mx.np.ndarray)
        if y.size == 0:
            self._empty = (y.shape, y.dtype, y.context)
        return y

    def backward(self, dy):
        # MXNet may call this on an engine thread, where npx.set_np()'s shape semantics
        # (a thread's setting) are off: an mx.np forward's backward needs them on.
        with mx.util.np_shape(True) if self._np else contextlib.nullcontext():
            return self._backward(dy)

    def _backward(self, dy):
        try:
            if self._empty is not None:
                # A rank that received no rows (alltoall): dy comes as a legacy NDArray,
                # which cannot hold a 0-size shape; it holds nothing anyway.
                shape, dtype, ctx = self._empty
                mine = mx.np.zeros(shape, dtype=dtype, ctx=ctx)
            else:
                # dy lives in the backward pass's planned memory, which MXNet hands on once
                # this callback returns, outside the engine's ordering: a collective still
                # to read it read another node's data (seen: garbage in a broadcast's
                # gradient). A copy (an engine operation, ordered after dy's writer), done
                # before returning, is ours.
                mine = dy.copy()
            mine.wait_to_read()  # raises the error of a failed op that dy depends on
        except Exception as e:
            # This rank's transposed collective will not be called: the peers' call fails
            # naming this rank and the reason, instead of waiting for it forever.
            self._refuse(e)
            raise
        grad = self._transpose(mine)
        # MXNet assigns it to a legacy NDArray, which takes no mx.np array.
        return grad.as_nd_ndarray() if isinstance(grad, mx.np.ndarray) else grad


def allreduce(tensor, average, name, priority, prescale_factor, postscale_factor, op,
              process_set):
    """:func:`mxhorovod.allreduce` while recording (see the module doc)."""
    code = _op_code(op, average)
    if code not in (Sum, Average):
        return submit.allreduce_plain(tensor, None, average, name, priority, prescale_factor,
                                      postscale_factor, op, process_set, "allreduce")
    name = submit.call_name("allreduce", name, set_id(process_set, "allreduce"))

    def run(x):
        return submit.allreduce_plain(x, None, average, name, priority, prescale_factor,
                                      postscale_factor, op, process_set, "allreduce")

    def transpose(dy):
        return submit.allreduce_plain(dy, None, None, name + ".grad", priority, prescale_factor,
                                      postscale_factor, code, process_set, "allreduce")
    return _Collective(run, transpose, _refusal("allreduce", name, process_set),
                       elementwise=True)(tensor)


def _refusal(kind, name, process_set):
    """What a backward that fails before its transposed collective (a ``kind`` named
    ``name + '.grad'``) submits instead: a refusal of the name the peers wait on first."""
    pid = set_id(process_set, kind)
    return lambda error: submit.refuse(kind, [name + ".grad"], pid, error)


def allgather(tensor, name, priority, process_set):
    """:func:`mxhorovod.allgather` while recording: the gradient is this rank's rows of the
    upstream gradients summed over the ranks."""
    name = submit.call_name("allgather", name, set_id(process_set, "allgather"))
    where = {}

    def run(x):
        outputs, rows = submit.grouped_allgather_plain([x], name, priority, process_set,
                                                       "allgather")
        counts = [int(v) for v in rows[:, 0]]
        me = process_set.rank()
        where["rows"] = (sum(counts[:me]), counts[me])
        return outputs[0]

    def transpose(dy):
        total = submit.allreduce_plain(dy, None, None, name + ".grad", priority, 1.0, 1.0, Sum,
                                       process_set, "allgather")
        start, count = where["rows"]
        return total[start:start + count]
    return _Collective(run, transpose, _refusal("allreduce", name, process_set))(tensor)


def broadcast(tensor, root_rank, name, priority, process_set):
    """:func:`mxhorovod.broadcast` while recording: the root's gradient is the upstream
    gradients summed over the ranks; the others' is zero."""
    name = submit.call_name("broadcast", name, set_id(process_set, "broadcast"))

    def run(x):
        return submit.broadcast_plain(x, None, root_rank, name, priority, process_set, "broadcast")

    def transpose(dy):
        total = submit.allreduce_plain(dy, None, None, name + ".grad", priority, 1.0, 1.0, Sum,
                                       process_set, "broadcast")
        return total if topology()[0] == root_rank else _zeros_like(dy)
    return _Collective(run, transpose, _refusal("allreduce", name, process_set),
                       elementwise=True)(tensor)


def alltoall(tensor, splits, name, priority, process_set):
    """:func:`mxhorovod.alltoall` while recording: the gradient goes back along the splits
    received. Returns what alltoall returns (with ``splits``: also the received splits,
    a constant to autograd)."""
    name = submit.call_name("alltoall", name, set_id(process_set, "alltoall"))
    received = {}

    def run(x):
        out, recv = submit.alltoall_plain(x, splits if splits is not None else _even(x, process_set),
                                          name, priority, process_set)
        received["splits"] = recv
        received["rows"] = x.shape[0]
        return out

    def transpose(dy):
        back, _ = submit.alltoall_plain(dy, received["splits"].asnumpy(), name + ".grad",
                                        priority, process_set)
        # Rows past sum(splits) were sent nowhere: their gradient is zero.
        return _pad_rows(back, received["rows"])
    out = _Collective(run, transpose,
                      _refusal("alltoall", name, process_set))(tensor)
    return (out, received["splits"]) if splits is not None else out


def _pad_rows(a, rows):
    """``a`` with zero rows appended up to ``rows`` rows (``a`` itself when it has them)."""
    if a.shape[0] == rows:
        return a
    rest = (rows - a.shape[0],) + tuple(a.shape[1:])
    if isinstance(a, mx.np.ndarray):
        return mx.np.concatenate([a, mx.np.zeros(rest, dtype=a.dtype, ctx=a.context)])
    zeros = mx.nd.zeros(rest, ctx=a.context, dtype=a.dtype)
    return zeros if a.shape[0] == 0 else mx.nd.concat(a, zeros, dim=0)


def _even(x, process_set):
    """The splits of an alltoall without ``splits`` (dimension 0 / size each; a shape that
    does not divide gets the call's own error)."""
    world = set_size(process_set, "alltoall")
    if x.ndim == 0 or x.shape[0] % world:
        return None
    return np.full(world, x.shape[0] // world, dtype=np.int64)


def reducescatter(tensor, op, name, priority, process_set, prescale_factor,
                  postscale_factor):
    """:func:`mxhorovod.reducescatter` while recording: the gradient is the ranks' upstream
    gradients gathered, scaled as the forward was."""
    code = _op_code(op, None)
    if code not in (Sum, Average):  # the call refuses it
        return submit.grouped_reducescatter([tensor], op, name, priority, process_set,
                                             prescale_factor, postscale_factor,
                                             _what="reducescatter")[0]
    name = submit.call_name("reducescatter", name, set_id(process_set, "reducescatter"))

    def run(x):
        return submit.grouped_reducescatter([x], op, name, priority, process_set,
                                             prescale_factor, postscale_factor,
                                             _what="reducescatter")[0]

    def transpose(dy):
        scale = float(prescale_factor) * float(postscale_factor)
        if code == Average:
            scale /= set_size(process_set, "reducescatter")
        gathered = submit.grouped_allgather_plain([dy], name + ".grad", priority, process_set,
                                                  "allgather")[0][0]
        return gathered * scale if scale != 1.0 else gathered
    return _Collective(run, transpose,
                       _refusal("allgather", name, process_set))(tensor)
