"""DistributedMetric: an ``mx.metric.EvalMetric`` whose results cover every rank's updates."""
import copy

import mxnet as mx

from mxhorovod.collectives.objects import allgather_object
from mxhorovod.collectives.ops import Sum, allreduce
from mxhorovod.common.process_sets import ProcessSet, global_process_set

__all__ = ["DistributedMetric"]

# Metrics whose whole state is EvalMetric's four numbers (sum_metric, num_inst and their
# global twins), each a sum over the updates: their results over all ranks come from one
# allreduce of those numbers. Subclasses are not included: they may keep more.
_SUMS_ONLY = (mx.metric.Accuracy, mx.metric.TopKAccuracy, mx.metric.MAE, mx.metric.MSE,
              mx.metric.RMSE, mx.metric.CrossEntropy, mx.metric.NegativeLogLikelihood,
              mx.metric.Perplexity, mx.metric.Loss, mx.metric.Torch, mx.metric.Caffe,
              mx.metric.CustomMetric)
_FIELDS = ("sum_metric", "num_inst", "global_sum_metric", "global_num_inst")

def _sums_only(metric):
    if type(metric) is mx.metric.CompositeEvalMetric:
        return all(_sums_only(m) for m in metric.metrics)
    return type(metric) in _SUMS_ONLY


def _leaves(metric):
    if type(metric) is mx.metric.CompositeEvalMetric:
        return [leaf for m in metric.metrics for leaf in _leaves(m)]
    return [metric]


def _kind(metric):
    """What must be the same on every rank: the classes and names, children included."""
    if isinstance(metric, mx.metric.CompositeEvalMetric):
        return ("%s(%s)" % (type(metric).__name__, metric.name),
                [_kind(m) for m in metric.metrics])
    return "%s(%s)" % (type(metric).__name__, metric.name)


def _to_numpy(arrays):
    """Labels or predictions as given to update: an NDArray, a numpy array, or a list or
    dict of them (and of lists), kept as numpy (NDArrays marked, to be rebuilt)."""
    if isinstance(arrays, mx.nd.NDArray):
        return ("nd", arrays.asnumpy())
    if isinstance(arrays, dict):
        return ("dict", [(k, _to_numpy(v)) for k, v in arrays.items()])
    if isinstance(arrays, (list, tuple)):
        return ("list" if isinstance(arrays, list) else "tuple", [_to_numpy(a) for a in arrays])
    return ("value", copy.deepcopy(arrays))


def _from_numpy(kept):
    kind, value = kept
    if kind == "nd":
        return mx.nd.array(value, dtype=value.dtype)
    if kind == "dict":
        return {k: _from_numpy(v) for k, v in value}
    if kind in ("list", "tuple"):
        items = [_from_numpy(v) for v in value]
        return items if kind == "list" else tuple(items)
    return value


class DistributedMetric(mx.metric.EvalMetric):
    """Wraps any ``mx.metric.EvalMetric`` (composite metrics and GluonCV's metrics
    included) so that :meth:`get` returns the metric over the updates of every rank of
    ``process_set``: the value one process would get from all their batches.

    ``update()`` stays local and cheap; each rank updates with its own shard. ``get()``,
    ``get_global()`` and ``get_name_value()`` are collectives: every rank of the set must call
    them, the same number of times, in the same order. Every rank gets the same result.

    How the ranks' updates are combined:

    - MXNet's metrics whose state is a sum and a count (``Accuracy``, ``TopKAccuracy``,
      ``MAE``, ``MSE``, ``RMSE``, ``CrossEntropy``, ``NegativeLogLikelihood``,
      ``Perplexity``, ``Loss``, ``CustomMetric``, and composites of them): one allreduce
      (op Sum, float64) of ``sum_metric`` and ``num_inst`` (and the global pair). RMSE is the
      mean of the per-batch RMSEs, as in one process.
    - Any other metric (``F1``, ``MCC``, ``PearsonCorrelation``, ``PCC``, GluonCV's
      ``VOCMApMetric``, your own): the wrapper keeps a numpy copy of every update's labels and
      predictions since the last ``reset()``, and ``get()`` gathers them
      (``allgather_object``) and replays them, rank 0's first, into a fresh copy of the
      metric. Exact for any metric, at the cost of the memory of those arrays (for
      detection metrics, about what the metric keeps itself).

    Args:
        metric: an ``mx.metric.EvalMetric``, or a name or list that ``mx.metric.create``
            takes (``'acc'``, ``['acc', 'ce']``).
        process_set: the ranks whose updates are combined (default: all).

    Raises (from ``get()``, on every rank of the set): ``ValueError`` naming the ranks when
    their metrics differ in class or name (a composite's children included); the errors of
    the collectives (a rank outside the set, ``hvd.init()`` not called).
    """

    def __init__(self, metric, process_set=global_process_set):
        if not isinstance(metric, mx.metric.EvalMetric):
            metric = mx.metric.create(metric)
        if not isinstance(process_set, ProcessSet):
            raise TypeError("DistributedMetric: process_set must be an hvd.ProcessSet, not %s"
                            % type(process_set).__name__)
        self.metric = metric
        self.process_set = process_set
        self._replay = not _sums_only(metric)
        self._fresh = copy.deepcopy(metric) if self._replay else None
        if self._fresh is not None:
            self._fresh.reset()
        self._records = []  # (local generation, method, labels, preds) to replay
        self._generation = 0
        super(DistributedMetric, self).__init__(
            metric.name, output_names=metric.output_names, label_names=metric.label_names,
            has_global_stats=getattr(metric, "_has_global_stats", False))
        self._ready = True  # EvalMetric.__init__ called reset(): the user's metric kept

    def __str__(self):
        return "DistributedMetric(%s)" % self.metric

    def __getattr__(self, name):
        # This rank's own state (num_inst, sum_metric, ...) and settings: the wrapped
        # metric's. Only for names the wrapper lacks.
        metric = self.__dict__.get("metric")
        if metric is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(metric, name)

    # -- local -----------------------------------------------------------------------
    def update(self, *args, **kwargs):
        """Updates the wrapped metric with this rank's batch (local: no collective). Takes
        what the metric's own ``update`` takes: ``(labels, preds)`` for MXNet's metrics,
        ``(pred_bboxes, pred_labels, pred_scores, gt_bboxes, gt_labels)`` for GluonCV's
        VOC mAP."""
        self.metric.update(*args, **kwargs)
        self._record("update", args, kwargs)

    def update_dict(self, label, pred):
        """``update_dict`` of the wrapped metric (local: no collective)."""
        self.metric.update_dict(label, pred)
        self._record("update_dict", (label, pred), {})

    def _record(self, method, args, kwargs):
        if self._replay:
            self._records.append((self._generation, method, _to_numpy(list(args)),
                                  _to_numpy(kwargs)))

    def reset(self):
        """Clears the local and global statistics of this rank (local)."""
        if getattr(self, "_ready", False):  # not from EvalMetric.__init__
            self.metric.reset()
            self._records = []
            self._generation = 0

    def reset_local(self):
        """Clears the local statistics of this rank, keeping the global ones (local)."""
        self.metric.reset_local()
        self._generation += 1
        if not getattr(self.metric, "_has_global_stats", False):
            self._records = []

    # -- collective ------------------------------------------------------------------
    def _combined(self):
        """A copy of the metric holding the updates of every rank of the set."""
        # One name whatever the metric, so that ranks whose metrics differ meet here.
        kinds = allgather_object((_kind(self.metric), self._replay and self._records),
                                 name="DistributedMetric.get", process_set=self.process_set)
        ranks = self.process_set.ranks or list(range(len(kinds)))
        mine = kinds[0][0]
        if any(k[0] != mine for k in kinds):
            raise ValueError(
                "DistributedMetric '%s': the ranks' metrics differ: %s" % (self.name, ", ".join(
                    "rank %d has %s" % (r, k[0]) for r, k in zip(ranks, kinds))))
        if self._replay:
            everything = [record for _, records in kinds for record in records]  # rank order
            combined = self._replayed(everything)
            if not self._generation:
                return combined, combined
            # The local statistics: the updates since the last reset_local() only.
            return self._replayed([rec for rec in everything if rec[0] == self._generation]), \
                combined
        leaves = _leaves(self.metric)
        numbers = mx.nd.array([float(getattr(m, f, 0)) for m in leaves for f in _FIELDS],
                              dtype="float64")
        total = allreduce(numbers, op=Sum, name="DistributedMetric.%s" % self.metric.name,
                          process_set=self.process_set).asnumpy()
        combined = copy.deepcopy(self.metric)
        for k, m in enumerate(_leaves(combined)):
            for j, f in enumerate(_FIELDS):
                value = total[k * len(_FIELDS) + j]
                kept = getattr(m, f, 0)  # a count may be a float (CustomMetric's feval)
                setattr(m, f, int(value) if isinstance(kept, int) and value == int(value)
                        else float(value))
        return combined, combined

    def _replayed(self, records):
        """A fresh copy of the metric given ``records``' updates, in order."""
        metric = copy.deepcopy(self._fresh)
        for _, method, args, kwargs in records:
            getattr(metric, method)(*_from_numpy(args), **_from_numpy(kwargs))
        return metric

    def get(self):
        """``(name, value)`` of the metric over every rank's updates since the last
        ``reset_local()`` (lists of them for a composite). A collective."""
        return self._combined()[0].get()

    def get_global(self):
        """``(name, value)`` over every rank's updates since the last ``reset()``. A
        collective."""
        return self._combined()[1].get_global()

    def get_config(self):
        return {"metric": self.metric.get_config(), "process_set": self.process_set.ranks}
