"""Checkpoints for the examples: rank 0 writes, rank 0 reads and broadcasts to all.

Only rank 0 touches the files, so a job whose ranks do not share a file system resumes just
as well. A checkpoint of epoch E is ``<dir>/<name>-<E:04d>.params`` (parameters),
``<dir>/<name>-<E:04d>.states`` (trainer or optimizer states, including the optimizer's
update counts and schedule) and ``<dir>/<name>-latest.txt`` holding E, written last.
"""
import os

import mxhorovod as hvd

__all__ = ["save_checkpoint", "latest_epoch", "resume_gluon", "resume_module"]


def _paths(directory, name, epoch):
    base = os.path.join(directory, "%s-%04d" % (name, epoch))
    return base + ".params", base + ".states"


def save_checkpoint(directory, name, epoch, net=None, trainer=None, module=None):
    """On rank 0 only: save a Gluon ``net`` + ``trainer`` or a ``module`` after ``epoch``.

    Returns the parameter file path on rank 0, None elsewhere.
    """
    if hvd.rank() != 0:
        return None
    os.makedirs(directory, exist_ok=True)
    params, states = _paths(directory, name, epoch)
    if module is not None:
        module.save_params(params)
        # Module.save_optimizer_states leaves the optimizer out (its update count, hence the
        # learning-rate schedule, would restart on resume); Trainer.save_states keeps it.
        with open(states, "wb") as f:
            f.write(module._updater.get_states(dump_optimizer=True))
    else:
        net.save_parameters(params)
        trainer.save_states(states)
    latest = os.path.join(directory, "%s-latest.txt" % name)
    with open(latest + ".tmp", "w") as f:
        f.write("%d\n" % epoch)
    os.replace(latest + ".tmp", latest)  # the marker moves only once the files are complete
    return params


def latest_epoch(directory, name):
    """The last saved epoch on rank 0, broadcast to all (0 when there is none)."""
    epoch = 0
    if hvd.rank() == 0:
        path = os.path.join(directory, "%s-latest.txt" % name)
        if os.path.exists(path):
            with open(path) as f:
                epoch = int(f.read().strip())
    return hvd.broadcast_object(epoch, root_rank=0, name="checkpoint.epoch")


def resume_gluon(directory, name, epoch, net, trainer):
    """Load epoch ``epoch`` on rank 0 and broadcast parameters and trainer states to all
    (``hvd.broadcast_optimizer_state``: the optimizer, its update counts and schedule, and
    every parameter's states).

    ``net`` must be initialized (shapes known) on every rank.
    """
    params, states = _paths(directory, name, epoch)
    if hvd.rank() == 0:
        net.load_parameters(params)
        trainer.load_states(states)
    hvd.broadcast_parameters(net.collect_params(), root_rank=0, prefix="checkpoint.params.")
    # The optimizer, its update counts and schedule, and the states of every parameter.
    hvd.broadcast_optimizer_state(trainer, root_rank=0)


def resume_module(directory, name, epoch, module):
    """Module version of :func:`resume_gluon` (module bound, params and optimizer set)."""
    params, states = _paths(directory, name, epoch)
    arg, aux = module.get_params()
    if hvd.rank() == 0:
        module.load_params(params)
        arg, aux = module.get_params()
    hvd.broadcast_parameters(arg, root_rank=0, prefix="checkpoint.arg.")
    hvd.broadcast_parameters(aux, root_rank=0, prefix="checkpoint.aux.")
    module.set_params(arg, aux)
    data = None
    if hvd.rank() == 0:
        with open(states, "rb") as f:
            data = f.read()
    module._updater.set_states(hvd.broadcast_object(data, root_rank=0, name="checkpoint.states"))
    module._optimizer = module._updater.optimizer
