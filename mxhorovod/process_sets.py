"""The path that pickled process sets name: ``mxhorovod.process_sets._unpickle`` and
``global_process_set`` (0.1.0 wrote them, and pickles written now still do), and
``_GlobalProcessSet`` (earlier pickles). A face, kept so those pickles (inside trainer
states files) load: the code is in :mod:`mxhorovod.common.process_sets`."""
from mxhorovod.common.process_sets import (__all__, ProcessSet,  # noqa: F401
                                           _GlobalProcessSet, add_process_set,
                                           global_process_set, remove_process_set)
from mxhorovod.common.process_sets import unpickle_set as _unpickle  # noqa: F401
