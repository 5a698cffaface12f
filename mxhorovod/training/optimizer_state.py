"""broadcast_optimizer_state: the root's optimizer states, update counts and schedule on
every rank; and the update counts of a states file loaded on another device id."""
import copy

import mxnet as mx

from mxhorovod.collectives.objects import allgather_object, broadcast_object
from mxhorovod.collectives.ops import broadcast_
from mxhorovod.common.basics import rank
from mxhorovod.common.process_sets import global_process_set
from mxhorovod.training.optimizer import DistributedOptimizer

__all__ = ["broadcast_optimizer_state", "counts_for_devices", "install_optimizer"]


def _inner(optimizer):
    return optimizer._optimizer if isinstance(optimizer, DistributedOptimizer) else optimizer


def counts_for_devices(optimizer, device_ids):
    """Gives each of ``device_ids`` the per-index update counts of the optimizer.

    MXNet keeps those counts per device id (``Optimizer._all_index_update_counts``): Adam's
    bias correction and every schedule read them. A states file holds the writer's ids
    only: ``cpu(0)`` on rank 0, ``cpu(1)`` on rank 1 of a DistributedTrainer on
    ``mx.cpu(hvd.local_rank())``. A rank that loads rank 0's file would start counting
    again from ``begin_num_update``. Each id with no counts of its own takes those of the
    lowest id that has some."""
    counts = optimizer._all_index_update_counts
    filled = sorted(d for d, c in counts.items() if c)
    if not filled:
        return
    for d in device_ids:
        if not counts.get(d):
            counts[d] = dict(counts[filled[0]])
    optimizer._set_current_context(device_ids[0] if device_ids else filled[0])


def install_optimizer(trainer, optimizer):
    """Makes ``optimizer`` (a plain MXNet optimizer) the one ``trainer`` updates with,
    keeping the Trainer's reduction: inside its DistributedOptimizer if it has one."""
    final = trainer._optimizer = _rewrap(trainer._optimizer, optimizer)
    for updater in getattr(trainer, "_updaters", None) or ():
        _set_updater_optimizer(updater, final)
    kv_updater = getattr(getattr(trainer, "_kvstore", None), "_updater", None)
    if trainer._update_on_kvstore and kv_updater is not None:
        _set_updater_optimizer(kv_updater, final)
    final.param_dict = {i: param for i, param in enumerate(trainer._params)}
    return final


def _set_updater_optimizer(updater, optimizer):
    # The Updater batches its calls when its optimizer was made with aggregate_num > 0
    # (SGD): kept for another optimizer (Adam), it passed lists to Adam.update.
    updater.optimizer = optimizer
    updater.aggregate_updates = getattr(optimizer, "aggregate_num", 0) > 0


def _targets(target):
    """(the optimizer, [(updater, its device ids, {index: weight})], trainer or None)."""
    if isinstance(target, mx.gluon.Trainer):
        if getattr(target, "_kv_initialized", False) and target._update_on_kvstore:
            raise ValueError("broadcast_optimizer_state: this Trainer updates on its kvstore "
                             "(update_on_kvstore=True), whose states live in the kvstore "
                             "server: use DistributedTrainer, or kvstore=None")
        updaters = []
        for k, (updater, ctx) in enumerate(zip(target._updaters, target._contexts)):
            weights = {}
            for i, param in enumerate(target._params):
                if param.grad_req == "null":
                    continue
                if param._data is None:
                    raise ValueError(
                        "broadcast_optimizer_state: parameter '%s' is not initialized yet "
                        "(deferred initialization): call it after the first forward pass, or "
                        "after hvd.broadcast_parameters() of initialized parameters"
                        % param.name)
                weights[i] = param.list_data()[k]
            updaters.append((updater, [ctx.device_id], weights))
        return target._optimizer, updaters, target
    if isinstance(target, mx.mod.Module):
        if not target.optimizer_initialized:
            raise ValueError("broadcast_optimizer_state: the Module has no optimizer yet: "
                             "call it after init_optimizer()")
        updater = target._updater
        if updater is None:
            raise ValueError("broadcast_optimizer_state: this Module updates on its kvstore "
                             "(update_on_kvstore), whose states live in the kvstore server")
        names = target._exec_group.param_names
        arrays = target._exec_group.param_arrays
        nd = len(target._context)
        # One updater for every device: index i * nd + k is parameter i on context k.
        weights = {}
        for i, name in enumerate(names):
            if target._exec_group.grad_req.get(name, "write") == "null":
                continue
            for k in range(nd):
                weights[i * nd + k] = arrays[i][k]
        return target._optimizer, [(updater, [c.device_id for c in target._context], weights)], \
            None
    if isinstance(target, mx.optimizer.Optimizer):
        return target, [], None
    raise TypeError("broadcast_optimizer_state: expected a gluon.Trainer (DistributedTrainer "
                    "included), an mx.mod.Module or an mx.optimizer.Optimizer, not %s"
                    % type(target).__name__)


def _flat(state):
    """The NDArrays of an optimizer state (an NDArray, None, or nested tuples/lists)."""
    if isinstance(state, mx.nd.NDArray):
        return [state]
    if isinstance(state, (tuple, list)):
        return [a for s in state for a in _flat(s)]
    return []


def broadcast_optimizer_state(target, root_rank=0, process_set=global_process_set):
    """Gives every rank the optimizer state of ``root_rank``, in place: what resuming
    needs after only the root loaded a checkpoint (as Horovod's PyTorch
    ``broadcast_optimizer_state``).

    Args:
        target: a ``gluon.Trainer`` (``DistributedTrainer`` included), an ``mx.mod.Module``
            (after ``init_optimizer``), or an ``mx.optimizer.Optimizer`` (then no
            per-parameter states: those live in its Updater).
        root_rank: the rank whose state every rank gets.
        process_set: the ranks taking part (default: all). Every rank of the set calls it.

    What every rank gets, from the root:

    - the optimizer itself (a copy of the root's: learning rate, weight decay,
      hyperparameters, ``num_update`` and the learning-rate scheduler with its position).
      A Trainer keeps its reduction (its ``DistributedOptimizer`` wrapper, if any);
    - the update count of every parameter (Adam's bias correction, schedules), put under
      this rank's device ids (MXNet counts per device id: ``cpu(0)`` on the root may be
      ``cpu(1)`` here);
    - the state arrays of every trainable parameter (momentum, Adam's means and variances,
      multi-precision float32 weights), broadcast in place. Ranks that have not stepped
      yet create theirs first, as their first step would; so does the root, for parameters
      it has none for.

    Returns None when the states are in place (the array broadcasts are asynchronous:
    reading a state waits for them).

    Errors come before anything is sent, on every rank, naming the ranks at fault.

    Raises:
        TypeError: ``target`` is none of the above (on that rank; ValueError on the others).
        ValueError: a trainable parameter is not initialized yet (deferred initialization:
            call after the first forward pass); a Trainer or Module that updates on a
            kvstore server; ranks whose trainable parameters (indices, shapes, dtypes)
            differ from the root's.
    """
    try:
        optimizer, updaters, trainer = _targets(target)
        problem = None
        layout = [(k, [(i, tuple(w.shape), str(w.dtype)) for i, w in sorted(weights.items())])
                  for k, (_, _, weights) in enumerate(updaters)]
    except (TypeError, ValueError) as e:
        problem, layout, local_error = str(e), None, e
    # Every rank's readiness and parameters first, so that no rank waits for a rank that
    # raised, or for states that another rank does not have.
    seen = allgather_object((problem, layout), name="broadcast_optimizer_state.check",
                            process_set=process_set)
    ranks = process_set.ranks or list(range(len(seen)))
    if problem is not None:
        raise local_error
    failed = ["rank %d: %s" % (r, p) for r, (p, _) in zip(ranks, seen) if p is not None]
    if failed:
        raise ValueError("broadcast_optimizer_state: other ranks could not take part (%s)"
                         % "; ".join(failed))
    root_layout = seen[ranks.index(root_rank)][1] if root_rank in ranks else layout
    differ = [r for r, (_, l) in zip(ranks, seen) if l != root_layout]
    if differ:
        raise ValueError(
            "broadcast_optimizer_state: ranks %s have other trainable parameters (indices, "
            "shapes or dtypes) than root rank %d: the optimizers do not hold the same model"
            % (differ, root_rank))
    inner = _inner(optimizer)
    positions = [d for _, ids, _ in updaters for d in ids]
    root_counts = [dict(inner._all_index_update_counts.get(d, {})) for d in positions]
    sent = broadcast_object((copy.copy(inner), root_counts), root_rank=root_rank,
                            name="broadcast_optimizer_state.optimizer",
                            process_set=process_set)
    new_inner, counts = sent
    root = rank() == root_rank
    if not root:
        new_inner._all_index_update_counts = {d: dict(c) for d, c in zip(positions, counts)}
        if not new_inner._all_index_update_counts:
            new_inner._all_index_update_counts = {0: {}}
        new_inner._set_current_context(positions[0] if positions else 0)
        if trainer is not None:
            install_optimizer(trainer, new_inner)
        elif isinstance(target, mx.mod.Module):
            target._optimizer = _rewrap(optimizer, new_inner)
            _set_updater_optimizer(target._updater, target._optimizer)
            new_inner.param_dict = getattr(inner, "param_dict", {})
            new_inner.idx2name = getattr(inner, "idx2name", {})
        else:  # an Optimizer: its attributes, in place (the caller holds this object)
            kept = {k: getattr(inner, k) for k in ("param_dict", "idx2name", "sym_info")
                    if hasattr(inner, k)}
            inner.__dict__.update(new_inner.__dict__)
            inner.__dict__.update(kept)
    for k, (updater, _, weights) in enumerate(updaters):
        for i, weight in weights.items():
            # Elsewhere than on the root, every state is made anew by the root's optimizer:
            # the structure of the root's states (Adam's two arrays where this rank's own
            # optimizer kept SGD's one), to be overwritten by them.
            if not root or i not in updater.states:
                updater.states[i] = updater.optimizer.create_state_multi_precision(i, weight)
                updater.states_synced[i] = True
        for i in sorted(weights):
            for j, array in enumerate(_flat(updater.states[i])):
                broadcast_(array, root_rank, name="broadcast_optimizer_state.%d.%s.%d"
                           % (k, i, j), process_set=process_set)


def _rewrap(old, new_inner):
    """``new_inner`` inside ``old``'s DistributedOptimizer if ``old`` is one, else itself."""
    if isinstance(old, DistributedOptimizer):
        object.__setattr__(old, "_optimizer", new_inner)
        return old
    return new_inner
