"""Framework plumbing every other part stands on: loading the extension against the user's
libmxnet and libmpi (binding, elf), the running session (state, basics: init, shutdown,
topology), process sets, automatic names, errors, logging, and what happens when a rank
fails (failures, launcher_connection).

Internal: users reach these through ``mxhorovod`` (``hvd.init``, ``hvd.ProcessSet``, ...).
"""
