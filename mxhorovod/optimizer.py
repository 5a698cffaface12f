"""The path that trainer states files of earlier releases name: a ``DistributedOptimizer``
pickled by ``gluon.Trainer.save_states`` records ``mxhorovod.optimizer.DistributedOptimizer``.
A face, kept so those files load: the code is in :mod:`mxhorovod.training.optimizer`."""
from mxhorovod.training.optimizer import (__all__, DistributedOptimizer,  # noqa: F401
                                          split_list)
