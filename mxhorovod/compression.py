"""Horovod's path ``horovod.mxnet.compression``: ``Compression.none``, ``Compression.fp16``
and the compressor classes. A face: the code is in :mod:`mxhorovod.training.compression`."""
from mxhorovod.training.compression import (__all__, Compression, Compressor,  # noqa: F401
                                            FP16Compressor, NoneCompressor, wire_path)
