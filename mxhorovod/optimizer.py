"""The path that trainer states files name: ``gluon.Trainer.save_states`` pickles a
``DistributedOptimizer`` as ``mxhorovod.optimizer.DistributedOptimizer`` (0.1.0 did, and
files written now still do). A face, kept so those files load: the code is in
:mod:`mxhorovod.training.optimizer`."""
from mxhorovod.training.optimizer import (__all__, DistributedOptimizer,  # noqa: F401
                                          allreduce_row_sparse_, split_list)
