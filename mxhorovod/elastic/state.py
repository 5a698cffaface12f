"""State objects of elastic training: what a commit keeps and a reset brings back.

As in Horovod (horovod/common/elastic.py, horovod/torch/elastic/state.py): ``commit()``
saves the state and checks for host changes; ``restore()`` goes back to the last commit;
``sync()`` makes every rank hold the root's state. In mxhorovod a commit is also written
to this host's commit store (mxhorovod/elastic/store.py) when the job runs under
``mxhorovodrun``'s elastic driver, so that the next job, started after a host was lost,
begins from it.
"""
import copy
import os
import tempfile

import mxnet as mx
import numpy as np
from mxnet.gluon.parameter import Parameter, ParameterDict

from mxhorovod.common.basics import rank
from mxhorovod.collectives.objects import broadcast_arrays, broadcast_object
from mxhorovod.elastic import runtime

__all__ = ["State", "ObjectState", "GluonState", "HostsUpdatedInterrupt",
           "HorovodInternalError"]


class HorovodInternalError(RuntimeError):
    """A collective failed because a peer or host was lost (Horovod's name). Under
    ``mxhorovodrun``'s elastic driver, ``hvd.elastic.run`` ends this rank so that the
    driver starts the job again without the lost host, from the last commit."""


class HostsUpdatedInterrupt(RuntimeError):
    """Raised by ``commit()`` / ``check_host_updates()`` on every rank at once when the
    driver's host discovery found hosts added or removed. ``skip_sync``: only hosts were
    removed (Horovod's meaning; here the next job always syncs)."""

    def __init__(self, skip_sync=False):
        super().__init__("the hosts of the elastic job changed")
        self.skip_sync = skip_sync


class State:
    """Base of the elastic states. Subclasses give ``save()``, ``restore()``, ``sync()``
    and, for the commit store, ``_snapshot()`` / ``_load_snapshot(obj)``.

    Args:
        bcast_object: ``broadcast_object``-like function (obj, root_rank=...) (default:
            ``hvd.broadcast_object``).
        get_rank: function returning this rank (default: ``hvd.rank``).
    """

    def __init__(self, bcast_object=None, get_rank=None):
        self._bcast_object = bcast_object or broadcast_object
        self._rank = get_rank or rank
        self._reset_callbacks = []
        self._commit_counter = 0  # commits made since the job's first start (all jobs)

    def register_reset_callbacks(self, callbacks):
        """Functions (no arguments) called after every reset, once the state is synced: in
        the new job, when the number of ranks may have changed (rescale the learning rate,
        rebuild a sampler's shards)."""
        self._reset_callbacks.extend(callbacks)

    def on_reset(self):
        self.reset()
        for callback in self._reset_callbacks:
            callback()

    def commit(self):
        """Saves the state (in memory, and under the elastic driver on each host's commit
        store, before returning), then :meth:`check_host_updates`. Every rank must call it
        at the same point (it is collective under the driver).

        Raises:
            HostsUpdatedInterrupt: on every rank, when hosts were added or removed (or
                one is leaving after a SIGTERM notice).
            OSError: the commit could not be written (a full commit directory).
        """
        self._save_and_persist()
        updated = self._hosts_updated()
        if updated:
            raise HostsUpdatedInterrupt(updated == "removed")

    def check_host_updates(self):
        """Asks whether the driver's host set changed (a host added, removed, or leaving
        after a SIGTERM notice); if so, commits (as :meth:`commit`) and raises
        ``HostsUpdatedInterrupt`` on every rank. Cheaper than a commit when nothing
        changed: call it after each step, where a commit could go, to stop within a step
        of a host's SIGTERM notice. Rank 0 asks the driver; its answer is broadcast, so
        every rank acts at the same call (collective under the driver). Outside the
        elastic driver: nothing (no collective).

        The commit is what keeps the steps since the last commit: in Horovod the same
        processes go on after the interrupt; here the next job's processes start from the
        newest commit.

        Raises:
            HostsUpdatedInterrupt: see above.
            OSError: the commit could not be written (a full commit directory).
        """
        updated = self._hosts_updated()
        if updated:
            self._save_and_persist()
            raise HostsUpdatedInterrupt(updated == "removed")

    def _save_and_persist(self):
        self.save()
        self._commit_counter += 1
        runtime.persist(self)

    def _hosts_updated(self):
        """None, or what changed (rank 0 asks the driver; broadcast). Collective under
        the elastic driver; None at once outside it."""
        if not runtime.elastic():
            return None
        updated = runtime.hosts_updated() if self._rank() == 0 else None
        return self._bcast_object(updated, root_rank=0)

    def save(self):
        raise NotImplementedError()

    def restore(self):
        raise NotImplementedError()

    def sync(self, root_rank=0):
        raise NotImplementedError()

    def reset(self):
        """Called after a reset, before the reset callbacks (subclasses: rebuild what
        depends on the number of ranks)."""

    def _snapshot(self):
        """The saved state (after ``save()``) as a picklable structure (numpy arrays for
        the large parts)."""
        raise NotImplementedError()

    def _load_snapshot(self, obj):
        """Makes ``obj`` (from ``_snapshot``) the saved and the current state."""
        raise NotImplementedError()


def _has_state_dict(value):
    return hasattr(value, "state_dict") and hasattr(value, "load_state_dict")


class ObjectState(State):
    """State of plain Python objects, kept as attributes: ``state.epoch``, ``state.batch``.

    ``ObjectState(epoch=0, batch=0)`` (or Horovod's ``ObjectState(bcast_object, get_rank,
    **kwargs)``). Values must pickle. A value with ``state_dict()`` / ``load_state_dict()``
    (an :class:`ElasticSampler`) is saved through those, as Horovod's TorchState does.
    ``save()`` copies the attributes (a deep copy), ``restore()`` sets them back,
    ``sync(root_rank)`` gives every rank the root's saved values.
    """

    def __init__(self, bcast_object=None, get_rank=None, **kwargs):
        super().__init__(bcast_object, get_rank)
        self._handled = {k: v for k, v in kwargs.items() if _has_state_dict(v)}
        self._saved_state = {k: v for k, v in kwargs.items() if k not in self._handled}
        self._saved_handled = {k: copy.deepcopy(v.state_dict()) for k, v in self._handled.items()}
        self._set_attrs()
        for k, v in self._handled.items():
            setattr(self, k, v)

    def save(self):
        self._saved_state = {k: copy.deepcopy(getattr(self, k)) for k in self._saved_state}
        self._saved_handled = {k: copy.deepcopy(v.state_dict()) for k, v in self._handled.items()}

    def restore(self):
        self._set_attrs()
        for k, v in self._handled.items():
            v.load_state_dict(copy.deepcopy(self._saved_handled[k]))

    def sync(self, root_rank=0):
        """Every rank gets the root's saved values (collective)."""
        self._saved_state, self._saved_handled, self._commit_counter = self._bcast_object(
            (self._saved_state, self._saved_handled, self._commit_counter),
            root_rank=root_rank)
        ObjectState.restore(self)

    def _set_attrs(self):
        for attr, value in self._saved_state.items():
            setattr(self, attr, copy.deepcopy(value))

    def _snapshot(self):
        return {"objects": self._saved_state, "handled": self._saved_handled,
                "counter": self._commit_counter}

    def _load_snapshot(self, obj):
        self._saved_state = obj["objects"]
        self._saved_handled = obj["handled"]
        self._commit_counter = obj["counter"]
        self.restore()


def _named_params(net_or_params):
    """[(name, Parameter)] in a rank-independent order."""
    if isinstance(net_or_params, mx.gluon.Block):
        net_or_params = net_or_params.collect_params()
    if isinstance(net_or_params, (ParameterDict, dict)):
        items = sorted(net_or_params.items(), key=lambda kv: str(kv[0]))
    elif isinstance(net_or_params, (list, tuple)):
        items = [(p.name, p) for p in net_or_params]
    else:
        raise ValueError("GluonState takes a gluon Block, a ParameterDict, a dict of "
                         "Parameters or a list of Parameters, not %s"
                         % type(net_or_params).__name__)
    for name, p in items:
        if not isinstance(p, Parameter):
            raise ValueError("GluonState: %r is a %s, not a gluon Parameter"
                             % (name, type(p).__name__))
    return [(str(n), p) for n, p in items]


def _data(name, p):
    try:
        return p.list_data()
    except mx.gluon.parameter.DeferredInitializationError:
        raise RuntimeError(
            "GluonState: parameter %r is not initialized yet (deferred): run one forward "
            "pass, or give the layer its input size (in_units, in_channels), before making "
            "the state" % name) from None
    except RuntimeError:
        raise RuntimeError("GluonState: parameter %r is not initialized: call "
                           "net.initialize() before making the state" % name) from None


class GluonState(ObjectState):
    """State of a Gluon model and its trainer, plus scalars (``epoch``, ``batch``, a
    sampler, ...), for data-parallel training where every rank holds the same values.

    Args:
        net_or_params: a ``gluon.Block`` (its ``collect_params()``), a ParameterDict / dict
            of Parameters (sorted by name), or a list of Parameters (in that order, the same
            on every rank). Every parameter must be initialized (not deferred).
        trainer: a ``gluon.Trainer`` / ``hvd.DistributedTrainer`` whose optimizer states
            (momentum, Adam's moments, update counts, the learning rate scheduler) are
            saved with the parameters; or None.
        **kwargs: scalars and objects kept as attributes (see :class:`ObjectState`).

    ``save()`` copies every parameter (its first context's array: all contexts hold the
    same values) and the trainer's states into host memory; ``restore()`` writes them back
    bit for bit; ``sync(root_rank)`` broadcasts parameters, trainer states and scalars
    from the root.

    Raises:
        ValueError: ``net_or_params`` is not one of the above.
        RuntimeError: a parameter is not initialized.
    """

    def __init__(self, net_or_params, trainer=None, **kwargs):
        self._params = _named_params(net_or_params)
        self.net = net_or_params if isinstance(net_or_params, mx.gluon.Block) else None
        self.trainer = trainer
        super().__init__(**kwargs)
        self._saved_params = None
        self._saved_trainer = None
        self._save_model()

    # --- parameters and trainer states ---
    def _save_model(self):
        arrays = [_data(n, p)[0] for n, p in self._params]
        self._saved_params = [a.asnumpy() for a in arrays]
        self._saved_trainer = self._trainer_states()

    def _trainer_states(self):
        t = self.trainer
        if t is None:
            return None
        if not t._kv_initialized:
            t._init_kvstore()
        if t._params_to_init:
            t._init_params()
        if t._update_on_kvstore:
            fd, path = tempfile.mkstemp(prefix="mxhorovod-trainer-")
            os.close(fd)
            try:
                t._kvstore.save_optimizer_states(path, dump_optimizer=True)
                with open(path, "rb") as f:
                    data = f.read()
            finally:
                os.unlink(path)
        else:
            data = t._updaters[0].get_states(dump_optimizer=True)
        return np.frombuffer(data, dtype=np.uint8)

    def _restore_model(self):
        for (name, p), value in zip(self._params, self._saved_params):
            for a in _data(name, p):
                a[:] = value  # a copy into the array, same dtype: bit for bit
        self._set_trainer_states(self._saved_trainer)
        # A DistributedTrainer's, or the DistributedOptimizer's of a plain gluon.Trainer.
        accumulation = getattr(self.trainer, "_accumulation", None) or getattr(
            getattr(self.trainer, "_optimizer", None), "_accumulation", None)
        if accumulation is not None:  # commits hold no gradients: a partial sum is dropped
            accumulation.done()

    def _set_trainer_states(self, data):
        if self.trainer is None or data is None:
            return
        fd, path = tempfile.mkstemp(prefix="mxhorovod-trainer-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(memoryview(data))
            # Trainer.load_states keeps the Trainer's reduction (mxhorovod/training/patches.py).
            self.trainer.load_states(path)
        finally:
            os.unlink(path)

    def save(self):
        self._save_model()
        super().save()

    def restore(self):
        self._restore_model()
        super().restore()

    def sync(self, root_rank=0):
        """Every rank gets the root's parameters, trainer states and saved scalars, then
        saves them (collective; blocks until done)."""
        for name, p in self._params:
            broadcast_arrays(_data(name, p), root_rank, "elastic.sync." + name)
        mine = self._trainer_states() if self._rank() == root_rank else None
        data = self._bcast_object(mine, root_rank=root_rank)
        if self._rank() != root_rank:
            self._set_trainer_states(data)
        mx.nd.waitall()
        super().sync(root_rank)
        self._save_model()

    def _snapshot(self):
        obj = super()._snapshot()
        obj["param_names"] = [n for n, _ in self._params]
        obj["params"] = list(self._saved_params)
        obj["trainer"] = self._saved_trainer
        return obj

    def _load_snapshot(self, obj):
        # By position: Gluon's automatic names come from per-process counters, so the same
        # model may carry other names in another process; the shapes must match.
        values, names = obj["params"], obj["param_names"]
        if len(values) != len(self._params):
            raise ValueError("GluonState: the commit holds %d parameters, this model %d "
                             "(commit: %s ...; model: %s ...)"
                             % (len(values), len(self._params), names[:3],
                                [n for n, _ in self._params][:3]))
        for (name, p), value, saved in zip(self._params, values, names):
            shape = _data(name, p)[0].shape
            if tuple(value.shape) != tuple(shape):
                raise ValueError("GluonState: parameter %r has shape %s; the commit's %r has "
                                 "shape %s" % (name, shape, saved, value.shape))
        self._saved_params = list(values)
        self._saved_trainer = obj["trainer"]
        super()._load_snapshot(obj)  # sets the scalars and calls restore()
