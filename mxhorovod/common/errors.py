"""The error a collective raises at its call for bad input.

mxhorovod refuses bad input (a wrong dtype, alltoall splits that do not add up, a rank
outside the process set, ...) at the call with a ``ValueError`` naming the tensor. Horovod's
MXNet binding reports most of the same cases from its core through MXNet's ``check_call``,
as ``mxnet.base.MXNetError`` (a ``RuntimeError``), and scripts and tests written for it
catch that (``except (MXNetError, RuntimeError)``). :class:`InvalidArgumentError` is both,
so code written for either library catches it.
"""
from mxnet.base import MXNetError

__all__ = ["InvalidArgumentError"]


class InvalidArgumentError(ValueError, MXNetError):
    """Bad input refused at a collective's call, before anything was submitted: a
    ``ValueError`` and an ``mxnet.base.MXNetError`` (hence a ``RuntimeError``)."""

    __module__ = "mxhorovod"  # its public name, in tracebacks and pickles: hvd.InvalidArgumentError
