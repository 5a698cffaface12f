"""Do the ranks reduce the same parameters, with the same settings? Checked before a
trainer's first reduction.

Compared over the trainer's process set: for each parameter, whether it is reduced, its
gradient's storage type, shape and dtype, and its number of contexts; the parameters' order
where the ranks name them alike; and the settings that decide the collectives
(``num_groups``, ``gradient_as_bucket_view``, ``gradient_predivide_factor``).
The cost is one small blocking allgather of a digest at the first step, and again on a rank
where the digest changes (``grad_req``, ``cast``, ``reset_ctx``, a new trainer).
A mismatch raises ``ValueError`` on every rank of the set, before anything is reduced,
naming the parameters or setting and each rank's value.
Parameters that ``reset_ctx`` moved onto another number of contexts than the trainer
reduces are refused the same way.
A change made on some ranks only after the first step is not caught: those ranks wait in
the check (the stall inspector names ``<prefix>layout``).
"""
import hashlib
import operator

import mxnet as mx
import numpy as np

from mxhorovod.collectives.objects import allgather_object
from mxhorovod.collectives.ops import allgather
from mxhorovod.common.process_sets import global_process_set

__all__ = ["LayoutCheck", "check_one_context", "module_rows"]


# What may change which collectives a trainer submits, read per step (a C-free attribute
# read per parameter: about 0.15 us each). The context list is replaced, never changed in
# place, by reset_ctx and re-initialization, so comparing it costs an identity test.
_quick = operator.attrgetter("_grad_req", "_grad_stype", "_ctx_list")


def _row(param):
    """(name, 'reduced', storage type, shape, dtype, number of contexts) of a reduced
    parameter, or (name, 'null') of a skipped one ('write' and 'add' reduce alike)."""
    if param.grad_req == "null":
        return (param.name, "null")
    shape = tuple(int(d) for d in param.shape) if param.shape is not None else None
    return (param.name, "reduced", param._grad_stype, shape, np.dtype(param.dtype).name,
            len(param._ctx_list or ()))


def _what(row):
    """A row for the message, without the parameter's name (which may differ by rank)."""
    if row[1] == "null":
        return "not reduced (grad_req 'null')"
    return "%s %s %s%s%s" % (row[4], row[3], "row_sparse " if row[2] != "default" else "",
                             "gradient", " on %d contexts" % row[5]
                             if len(row) > 5 and row[5] > 1 else "")


def _digest(value):
    """A signed 64-bit digest of ``repr(value)`` (for an int64 allgather)."""
    digest = hashlib.blake2b(repr(value).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _reordered(every):
    """Whether some ranks hold the same parameter names as another rank in another order
    (``every``: one row per rank of [layout, count, names, sorted names] digests). Ranks
    whose names differ (Gluon's per-process counters) say nothing about order."""
    return bool(((every[:, 3] == every[0, 3]) & (every[:, 2] != every[0, 2])).any())


class LayoutCheck(object):
    """One per trainer: ``check(params, name, process_set, label)`` before each reduction,
    on every rank of the set alike.

    ``params``: the trainer's parameter list (the index of each is its collective's
    number). Cheap when nothing changed since the last call (two attributes per
    parameter: about 15 us per 100 parameters); else one blocking allgather under
    ``name`` (and an allgather of the lists under ``name + '.lists'`` when the ranks
    differ)."""

    def __init__(self):
        self._last = None  # what changes the collectives, as of the last check

    def check(self, params, name, process_set, label, settings=(), contexts=None):
        """``settings``: ``(name, value)`` pairs of the trainer's settings that decide its
        collectives (``('num_groups', 2)``), which every rank must have alike.
        ``contexts``: the number of contexts per parameter the trainer reduces and
        updates (``DistributedTrainer``: 1; a ``gluon.Trainer``: those it was made with).

        Raises:
            ValueError: on every rank of ``process_set``, when the ranks' trainers differ
                in the number of parameters or in which ones they reduce, and how (grad_req
                'null' or not, storage type, shape, dtype, number of contexts), or in
                ``settings``; ``label`` names the trainer. With ``contexts``, when a reduced
                parameter is on another number of contexts (``reset_ctx`` after the trainer
                was made), naming the parameters."""
        rows = []  # filled only when something changed since the last check

        def make_rows():
            rows.extend(_row(p) for p in params)
            return rows

        self.check_rows(tuple(map(_quick, params)), make_rows, name, process_set, label,
                        settings)
        if contexts is not None and rows:  # checked now: the rows agree on every rank
            # 0: never initialized, which the step itself reports (MXNet's RuntimeError).
            other = [(i, r) for i, r in enumerate(rows)
                     if len(r) > 5 and r[5] and r[5] != contexts]
            if other:
                self._last = None  # refused again at the next step
                raise ValueError(
                    "%s: parameter %s: on %d contexts per rank, but the trainer was made for "
                    "%d and reduces and updates that many (moved with reset_ctx after the "
                    "trainer was made?): the other copies' gradients would be left out and "
                    "their weights never updated, drifting apart without a word (as with "
                    "MXNet's own Trainer). Make the trainer after placing the parameters%s"
                    % (label, ", ".join("%d ('%s')" % (i, r[0]) for i, r in other[:4]) +
                       (", ... (%d in all)" % len(other) if len(other) > 4 else ""),
                       other[0][1][5], contexts,
                       ", on one context per rank (one process per device; several "
                       "contexts: a gluon.Trainer with hvd.DistributedOptimizer and "
                       "kvstore='device')" if contexts == 1 else ""))

    def check_rows(self, quick, rows, name, process_set, label, settings=()):
        """:meth:`check` for parameters that are not Gluon Parameters (Module's arrays):
        ``quick`` is cheap to compute and changes whenever ``rows()`` may (compared with the
        last call's); ``rows()`` gives one tuple per parameter, as ``_row`` does."""
        settings = tuple(settings)
        if (quick, settings) == self._last:
            return
        rows = rows()
        shown = [r[1:] for r in rows]  # names may differ by rank (Gluon's counters)
        names = [r[0] for r in rows]
        mine = mx.nd.array([[_digest(shown), len(rows), _digest(names), _digest(sorted(names)),
                             _digest(settings)]], dtype=np.int64)
        every = allgather(mine, name=name, process_set=process_set).asnumpy()
        if (every[:, :2] == every[0, :2]).all() and (every[:, 4] == every[0, 4]).all() \
                and not _reordered(every):
            self._last = (quick, settings)
            return
        lists = allgather_object((rows, settings), name=name + ".lists",
                                 process_set=process_set)
        raise ValueError(self._message(lists, label, process_set))

    @staticmethod
    def _message(lists, label, process_set):
        """``lists``: each rank's ``(rows, settings)``, in the set's order."""
        ranks = process_set.ranks if process_set is not global_process_set and \
            process_set.ranks else list(range(len(lists)))
        settings_parts = _settings_differences([s for _, s in lists], ranks)
        lists = [rows for rows, _ in lists]
        first, parts = lists[0], []
        for r, other in zip(ranks[1:], lists[1:]):
            names_first, names_other = [a[0] for a in first], [b[0] for b in other]
            if names_first != names_other and sorted(names_first) == sorted(names_other):
                moved = ["%d is '%s' on rank %d, '%s' on rank %d" % (i, a, ranks[0], b, r)
                         for i, (a, b) in enumerate(zip(names_first, names_other)) if a != b]
                parts.append("the same parameters in another order (gradients are matched "
                             "by position, so they would be averaged with other parameters'"
                             "): parameter " + "; parameter ".join(moved[:4]) +
                             ("; ... (%d in all)" % len(moved) if len(moved) > 4 else ""))
                continue
            if len(other) != len(first):
                parts.append("rank %d has %d parameters, rank %d %d"
                             % (r, len(other), ranks[0], len(first)))
            diffs = ["%d ('%s'): rank %d %s, rank %d %s" % (i, a[0], ranks[0], _what(a), r,
                                                           _what(b))
                     for i, (a, b) in enumerate(zip(first, other)) if a[1:] != b[1:]]
            if diffs:
                parts.append("parameter " + "; parameter ".join(diffs[:4]) +
                             ("; ... (%d in all)" % len(diffs) if len(diffs) > 4 else ""))
        message = []
        if settings_parts:
            message.append(
                "%s: the ranks made it with different settings, which change its collectives "
                "(every rank must make it alike): %s" % (label, "; ".join(settings_parts)))
        if parts:
            message.append(
                "%s: the parameters reduced differ between ranks (every rank must train "
                "the same parameters, with the same grad_req, storage types, shapes and "
                "dtypes; a layer frozen or added on some ranks only?): %s"
                % (label, "; ".join(parts)))
        return ". ".join(message)


def _ranks_text(ranks):
    return ("rank %d" % ranks[0] if len(ranks) == 1
            else "ranks " + ", ".join(str(r) for r in ranks[:8]) +
            (", ... (%d in all)" % len(ranks) if len(ranks) > 8 else ""))


def _settings_differences(every, ranks):
    """['num_groups: 2 on rank 0, 0 on rank 1', ...] for each setting whose value differs
    between the ranks (``every``: each rank's ``(name, value)`` pairs; ``ranks``: their
    job ranks)."""
    parts = []
    for key in dict.fromkeys(k for pairs in every for k, _ in pairs):
        values = [dict(pairs).get(key, "(none)") for pairs in every]
        if all(v == values[0] for v in values):
            continue
        by_value = {}
        for r, v in zip(ranks, values):
            by_value.setdefault(repr(v), []).append(r)
        parts.append("%s: %s" % (key, ", ".join("%s on %s" % (v, _ranks_text(rs))
                                                 for v, rs in by_value.items())))
    return parts


def module_rows(group):
    """Rows (as ``_row``) of a Module's parameters: ``group`` is its executor group, whose
    ``grad_arrays`` entry is None for a parameter without a gradient (``fixed_param_names``
    or ``grad_req='null'``), which ``Module.update`` skips."""
    rows = []
    for name, data, grads in zip(group.param_names, group.param_arrays, group.grad_arrays):
        if not grads or grads[0] is None:
            rows.append((name, "null"))
        else:
            rows.append((name, "reduced", grads[0].stype, tuple(data[0].shape),
                         np.dtype(data[0].dtype).name))
    return rows


def check_one_context(contexts, label):
    """Raises ValueError when a DistributedOptimizer serves more than one context of this
    rank with no kvstore to sum them (``kvstore=None``): each context's gradient was
    averaged with the same context of the other ranks only, so every context trained its own
    copy of the weights, which drifted apart without a word (as in MXNet alone and in
    Horovod)."""
    if contexts is not None and len(contexts) > 1:
        raise ValueError(
            "%s and kvstore=None on %d contexts per rank (%s): each context would train its "
            "own copy of the weights (nothing sums the contexts of one rank). Use one context "
            "per rank (mpirun one process per device), or kvstore='device' to sum them first"
            % (label, len(contexts), ", ".join(str(c) for c in contexts)))
