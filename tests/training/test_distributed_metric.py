"""hvd.DistributedMetric (issue 48) on 2 and 3 ranks: equal to one metric updated with every
rank's batches, for MXNet's metrics (sums and counts, and the others: F1, MCC, Pearson,
PCC), composites, global statistics and GluonCV's VOC mAP; metrics that differ between
ranks raise on every rank. The worker, tests/training/workers/distributed_metric.py,
asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3], ids=lambda np_: "np%d" % np_)
def test_distributed_metric(np_):
    run_ranks(np_, "distributed_metric.py", timeout=120)
