"""Gradient compression for the wire: what a tensor is cast to before its allreduce.

``Compression.none`` sends tensors as they are; ``Compression.fp16`` sends floating-point
tensors as float16 (half the bytes) and casts the reduced result back to the original dtype.
Integer tensors are never touched. Names and behaviour follow ``horovod.mxnet.Compression``.
"""
import numpy as np

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


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


class Compression(object):
    """The gradient compressors, for ``compression=`` of :class:`DistributedTrainer`.

    ``Compression.none`` (the default) sends every gradient as it is.
    ``Compression.fp16`` sends float32 and float64 gradients as float16 (half the bytes)
    and casts the result back to the gradient's dtype; other dtypes (float16, integers) are
    sent unchanged. Values beyond float16's range (about 65504) become inf.
    """
    none = NoneCompressor
    fp16 = FP16Compressor
