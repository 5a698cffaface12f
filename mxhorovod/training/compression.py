"""Gradient compression for the wire: what a tensor is cast to before its allreduce.

``Compression.none`` sends tensors as they are; ``Compression.fp16`` sends floating-point
tensors as float16 (half the bytes) and casts the reduced result back to the original dtype.
Integer tensors are never touched. Names and behaviour follow ``horovod.mxnet.Compression``.
"""
import collections

import mxnet as mx
import numpy as np

import mxhorovod._core as _core
from mxhorovod.collectives.submit import settle

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression", "wire_path"]


class Compressor(object):
    """Interface: ``compress(tensor) -> (tensor_to_send, ctx)`` and
    ``decompress(tensor, ctx) -> tensor in the original dtype``."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends the tensor unchanged (the very same NDArray, no copy)."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


def _is_float(dtype):
    return np.issubdtype(np.dtype(dtype), np.floating)


class FP16Compressor(Compressor):
    """Casts float16/32/64 tensors to float16 for the collective and back afterwards.

    ``compress`` returns a new float16 NDArray (the same array when it already is float16)
    and the original dtype as ``ctx``; tensors of other dtypes pass through unchanged.
    ``decompress`` returns a new array in the original dtype (or the array itself when no
    cast is needed). Values beyond float16's range (about 6.5e4) overflow to inf.
    """

    @staticmethod
    def compress(tensor):
        if _is_float(tensor.dtype) and np.dtype(tensor.dtype) != np.float16:
            return tensor.astype(np.float16), tensor.dtype
        return tensor, tensor.dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and np.dtype(tensor.dtype) != np.dtype(ctx):
            return tensor.astype(ctx)
        return tensor

    @staticmethod
    def compress_into(tensor, buffers, key):
        """``compress(tensor)``, cast into a float16 array kept in ``buffers`` (a dict) under
        ``key`` (a :class:`WireBuffer`) and reused while the tensor's shape and device stay
        the same: no new array each step. ``key``, as a str, also names the tensor in the
        error of a cast that fails when it runs. Returns (array to send, original dtype).
        The same NDArray object as the last call under ``key`` skips the checks (an
        NDArray's dtype, shape and device never change)."""
        wire = buffers.get(key)
        if wire is not None and wire.source is tensor:
            _cast(tensor, wire.buf, wire.fast, key)
            return wire.buf, wire.dtype
        dtype = tensor.dtype
        if not _is_float(dtype) or np.dtype(dtype) == np.float16:
            return tensor, dtype
        buf = wire.buf if wire is not None else None
        if buf is None or buf.shape != tensor.shape or buf.context != tensor.context:
            buf = mx.nd.empty(tensor.shape, ctx=tensor.context, dtype=np.float16)
        fast = np.dtype(dtype) == np.float32
        buffers[key] = WireBuffer(tensor, buf, dtype, fast)
        _cast(tensor, buf, fast, key)
        return buf, dtype

    @staticmethod
    def decompress_into(tensor, ctx, out):
        """Writes ``decompress(tensor, ctx)`` into ``out`` (an NDArray of ``ctx``'s dtype
        and ``tensor``'s shape) with one cast: no temporary array and no copy. Between
        float16 and float32 the cast runs mxhorovod's F16C kernels (the same bits as
        MXNet's cast)."""
        _cast(tensor, out, ctx in _FLOAT32 and tensor.dtype == np.float16)


class WireBuffer(collections.namedtuple("WireBuffer", "source buf dtype fast")):
    """What ``FP16Compressor.compress_into`` keeps per key: the NDArray it last cast
    (``source``, held so that the identity check is sound), its float16 wire buffer
    ``buf``, the source's dtype, and whether the cast takes mxhorovod's F16C path
    (float32)."""
    __slots__ = ()


def _cast(src, out, fast, name=""):
    """``mx.nd.cast(src, dtype=out.dtype, out=out)``, the same bits. ``fast`` (the caller
    knows the pair is float32 -> float16 or float16 -> float32): mxhorovod's engine
    operation on F16C kernels, about 3x MXNet's speed, except for an array that MKLDNN may
    hold in its own layout outside a gradient reduction (a weight after an inference-mode
    forward), which the engine operation cannot read. ``name`` (str() of it): the
    tensor's, in the error of an engine operation that fails when it runs."""
    if fast and not _may_be_mkldnn(src, out):
        _core.cast(src.handle.value, out.handle.value, 0, str(name))
    else:
        # mx.nd.cast refuses mx.np arrays (npx.set_np()): legacy views of the same memory.
        mx.nd.cast(src.as_nd_ndarray(), dtype=np.dtype(out.dtype).name,
                   out=out.as_nd_ndarray())


def _may_be_mkldnn(src, out):
    """Whether MKLDNN may hold ``src`` or ``out`` (one is float32) in its own layout
    (mxhorovod.collectives.submit.settle): with MKLDNN, outside gradient_reduction() (DistributedTrainer's
    gradients never are), a float32 array of 2 to 5 dimensions. Checked in that order: the
    trainer's path reads one flag."""
    if not settle():
        return False
    f32 = src if np.dtype(src.dtype) == np.float32 else out
    return 2 <= len(f32.shape) <= 5


_FLOAT32 = (np.float32, np.dtype(np.float32), "float32")


def _fast_path(compression, name):
    """``compression``'s ``<name>_into``, where the class that defines it also defines
    ``name`` (a subclass of ``Compression.fp16`` that overrides ``compress`` or
    ``decompress`` gets its own method called, not the inherited fast path); else None."""
    if isinstance(compression, type):
        cls = compression
    elif name in getattr(compression, "__dict__", {}):
        return None  # set on the instance
    else:
        cls = type(compression)
    owner = next((k for k in cls.__mro__ if name in vars(k)), None)
    fast = next((k for k in cls.__mro__ if name + "_into" in vars(k)), None)
    if fast is None or owner is not fast:
        return None
    return getattr(compression, name + "_into")


def wire_path(compression):
    """The two functions a trainer calls per gradient, chosen once for ``compression``:
    ``compress(tensor, buffers, key) -> (array to send, ctx)`` and
    ``decompress_into(sent, ctx, out)``, which writes ``compression.decompress(sent, ctx)``
    into ``out``. Where the compressor's class defines ``compress_into`` or
    ``decompress_into`` beside its own ``compress`` or ``decompress``
    (``Compression.fp16``), those run: a float16 array of ``buffers`` (a dict) reused
    under ``key`` from step to step, and one cast straight into ``out``. Any other
    compressor (Horovod's interface; a subclass that overrides ``compress`` or
    ``decompress``) gets its own methods and an assignment. ``sent`` must not be ``out``
    (MXNet never runs a copy of an array onto itself)."""
    compress = _fast_path(compression, "compress")
    decompress_into = _fast_path(compression, "decompress")
    if compress is None:
        def compress(tensor, buffers, key):
            return compression.compress(tensor)
    if decompress_into is None:
        def decompress_into(tensor, ctx, out):
            out[:] = compression.decompress(tensor, ctx)
    return compress, decompress_into


class Compression(object):
    """The gradient compressors, for ``compression=`` of :class:`DistributedTrainer`.

    ``Compression.none`` (the default) sends every gradient as it is.
    ``Compression.fp16`` sends float32 and float64 gradients as float16 (half the bytes)
    and casts the result back to the gradient's dtype; other dtypes (float16, integers) are
    sent unchanged. Values beyond float16's range (about 65504) become inf. In
    ``DistributedTrainer`` a float32 gradient's casts run mxhorovod's F16C kernels as
    MXNet engine operations: the same bits as ``mx.nd.cast`` (round to nearest even), at
    about 3 times its speed.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
