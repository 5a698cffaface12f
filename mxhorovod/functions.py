"""Horovod's path ``horovod.mxnet.functions``: ``broadcast_parameters``,
``broadcast_object``, ``allgather_object``. A face: the code is in
:mod:`mxhorovod.collectives.objects`."""
from mxhorovod.collectives.objects import (__all__, allgather_object,  # noqa: F401
                                           broadcast_object, broadcast_parameters)
