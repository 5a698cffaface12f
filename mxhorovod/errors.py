"""The path of ``InvalidArgumentError`` in 0.1.0, whose tracebacks named
``mxhorovod.errors.InvalidArgumentError``: scripts that catch it by that path still work.
A face: the class is ``hvd.InvalidArgumentError`` (:mod:`mxhorovod.common.errors`)."""
from mxhorovod.common.errors import InvalidArgumentError  # noqa: F401

__all__ = ["InvalidArgumentError"]
