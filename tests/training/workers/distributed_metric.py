"""hvd.DistributedMetric against one metric updated with every rank's batches, in rank
order (tests/training/test_distributed_metric.py runs it on 2 and 3 ranks). Each rank
updates with batches of its own (uneven counts and sizes); get() must equal the one-process
metric on every rank. Then: a metric whose class differs between ranks (an error naming
the ranks), and a set of ranks {0, 1}. Prints RANK <r> OK."""
import numpy as np
import mxnet as mx
from gluoncv.utils.metrics.voc_detection import VOC07MApMetric

import mxhorovod as hvd

pair = hvd.ProcessSet([0, 1])
hvd.init(process_sets=[pair])
r, n = hvd.rank(), hvd.size()


def batches(rank, kind):
    """The batches of `rank` for a metric of `kind`: rank + 1 batches of 3 + rank samples."""
    rng = np.random.RandomState(100 + rank)
    out = []
    for b in range(rank + 1):
        m = 3 + rank
        if kind == "class":
            label = rng.randint(0, 4, m).astype(np.float32)
            pred = rng.rand(m, 4).astype(np.float32)
        elif kind == "binary":
            label = rng.randint(0, 2, m).astype(np.float32)
            pred = rng.rand(m, 2).astype(np.float32)
        elif kind == "regression":
            label = rng.randn(m).astype(np.float32)
            pred = (label + 0.3 * rng.randn(m)).astype(np.float32)
        out.append(([mx.nd.array(label)], [mx.nd.array(pred)]))
    return out


def detections(rank):
    rng = np.random.RandomState(200 + rank)
    out = []
    for b in range(rank + 1):
        gt = rng.rand(1, 3, 4).astype(np.float32) * 50
        gt[..., 2:] += gt[..., :2] + 10
        boxes = gt + rng.randn(*gt.shape).astype(np.float32) * 3
        out.append(dict(pred_bboxes=mx.nd.array(boxes), pred_labels=mx.nd.array(rng.randint(0, 3, (1, 3))),
                        pred_scores=mx.nd.array(rng.rand(1, 3)), gt_bboxes=mx.nd.array(gt),
                        gt_labels=mx.nd.array(rng.randint(0, 3, (1, 3)))))
    return out


def same(got, want, what):
    got_names, got_values = got
    want_names, want_values = want
    assert got_names == want_names, (r, what, got_names, want_names)
    g = np.asarray(got_values, np.float64)
    w = np.asarray(want_values, np.float64)
    assert np.allclose(g, w, rtol=1e-9, atol=1e-12, equal_nan=True), (r, what, g, w)


CASES = [
    ("acc", lambda: mx.metric.Accuracy(), "class"),
    ("top_k", lambda: mx.metric.TopKAccuracy(top_k=2), "class"),
    ("ce", lambda: mx.metric.CrossEntropy(), "class"),
    ("perplexity", lambda: mx.metric.Perplexity(ignore_label=None), "class"),
    ("mse", lambda: mx.metric.MSE(), "regression"),
    ("rmse", lambda: mx.metric.RMSE(), "regression"),
    ("mae", lambda: mx.metric.MAE(), "regression"),
    ("custom", lambda: mx.metric.np(lambda l, p: float(np.abs(l - p).max())), "regression"),
    ("f1_micro", lambda: mx.metric.F1(average="micro"), "binary"),
    ("f1_macro", lambda: mx.metric.F1(average="macro"), "binary"),
    ("mcc", lambda: mx.metric.MCC(average="micro"), "binary"),
    ("pearson_micro", lambda: mx.metric.PearsonCorrelation(average="micro"), "regression"),
    ("pearson_macro", lambda: mx.metric.PearsonCorrelation(average="macro"), "regression"),
    ("pcc", lambda: mx.metric.PCC(), "class"),
    ("composite_sums", lambda: mx.metric.create(["acc", "ce"]), "class"),
    ("composite_mixed", lambda: mx.metric.create(["acc", mx.metric.F1()]), "binary"),
    ("global_stats", lambda: mx.metric.Accuracy(), "class"),  # keeps global statistics
]

for what, make, kind in CASES:
    metric = hvd.DistributedMetric(make())
    ref = make()
    for rank in range(n):
        for labels, preds in batches(rank, kind):
            ref.update(labels, preds)
            if rank == r:
                metric.update(labels, preds)
    same(metric.get(), ref.get(), what)
    same(tuple(zip(*metric.get_name_value())), tuple(zip(*ref.get_name_value())),
         what + " get_name_value")
    if what == "global_stats":
        metric.reset_local()
        ref.reset_local()
        for rank in range(n):
            for labels, preds in batches(rank, kind)[:1]:
                ref.update(labels, preds)
                if rank == r:
                    metric.update(labels, preds)
        same(metric.get(), ref.get(), what + " after reset_local")
        same(metric.get_global(), ref.get_global(), what + " global")
    metric.reset()
    wrapped = metric.metric
    leaves = wrapped.metrics if isinstance(wrapped, mx.metric.CompositeEvalMetric) else [wrapped]
    assert all(m.num_inst == 0 for m in leaves), (r, what)

# A count that is not an integer (a CustomMetric's weights) stays as it is; the wrapper
# shows this rank's own state.
weighted = lambda: mx.metric.CustomMetric(  # noqa: E731
    lambda l, p: (float(np.abs(l - p).sum()), 0.37 * len(l)), name="weighted")
metric, ref = hvd.DistributedMetric(weighted()), weighted()
for rank in range(n):
    for labels, preds in batches(rank, "regression"):
        ref.update(labels, preds)
        if rank == r:
            metric.update(labels, preds)
assert metric.num_inst == metric.metric.num_inst > 0, r
same(metric.get(), ref.get(), "weighted counts")

# GluonCV's VOC mAP: records kept by the metric, five arguments to update.
metric = hvd.DistributedMetric(VOC07MApMetric(iou_thresh=0.5, class_names=["a", "b", "c"]))
ref = VOC07MApMetric(iou_thresh=0.5, class_names=["a", "b", "c"])
for rank in range(n):
    for d in detections(rank):
        args = (d["pred_bboxes"], d["pred_labels"], d["pred_scores"], d["gt_bboxes"],
                d["gt_labels"])
        ref.update(*args)
        if rank == r:
            metric.update(*args)
same(metric.get(), ref.get(), "voc07 map")

# A metric of another class on one rank: an error on every rank, naming them.
try:
    hvd.DistributedMetric(mx.metric.F1() if r == 0 else mx.metric.Accuracy()).get()
except ValueError as e:
    assert "rank 0 has F1(f1)" in str(e) and "rank 1 has Accuracy(accuracy)" in str(e), str(e)
else:
    raise AssertionError("rank %d: no error for metrics that differ" % r)

# A set of ranks {0, 1}: the other ranks take no part.
if r in (0, 1):
    metric = hvd.DistributedMetric(mx.metric.Accuracy(), process_set=pair)
    ref = mx.metric.Accuracy()
    for rank in (0, 1):
        for labels, preds in batches(rank, "class"):
            ref.update(labels, preds)
            if rank == r:
                metric.update(labels, preds)
    same(metric.get(), ref.get(), "process set")
hvd.allreduce(mx.nd.ones((1,)), name="done").wait_to_read()  # rank 2 stays till the pair ends
print("RANK %d OK" % r, flush=True)
