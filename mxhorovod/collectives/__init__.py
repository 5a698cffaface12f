"""The collectives on NDArrays: the plain submission path into MXNet's engine (submit), the
public calls with autograd support (ops, autograd), and collectives of parameters and
Python objects (objects, with deferred initialization's hook in deferred_init).

Internal: users reach these through ``mxhorovod`` (``hvd.allreduce``, ...) and Horovod's
paths ``mxhorovod.mpi_ops`` and ``mxhorovod.functions``.
"""
