"""examples/gluoncv_syncbn.py (GluonCV's Fast-SCNN with norm_layer=hvd.SyncBatchNorm) on 2
ranks against one process with gluon.nn.BatchNorm on the concatenated batch: the same
losses, step by step, and the same final parameters and running statistics. gluoncv is in
the [examples] extra: imported here, never skipped."""
import json
import os

import gluoncv  # the [examples] extra: a missing install fails, not skips
import numpy as np

from mxhorovod_devtools.mpirun import run_ranks
from support.paths import EXAMPLES

SCRIPT = os.path.join(EXAMPLES, "gluoncv_syncbn.py")
# No dropout (its masks differ between the runs). float64: Fast-SCNN's pyramid pooling
# normalizes 1x1 features over a few samples, where float32 rounding grows step by step
# (0.05% apart at step 3 between MXNet's BatchNorm and SyncBatchNorm's sums in float32,
# 1e-5 at step 2); in float64 the two agree to 1e-9. tests/training checks float32.
COMMON = ["--steps", "3", "--dropout", "0", "--lr", "0.01", "--image-size", "64",
          "--dtype", "float64"]


def run(np_, out, *args):
    proc = run_ranks(np_, SCRIPT, args=COMMON + ["--check-file", out] + list(args),
                     timeout=120, expect_ok=False)
    assert proc.returncode == 0, "exit %d\n%s" % (proc.returncode, proc.stdout[-6000:])
    return np.load(out), proc.stdout


def test_two_ranks_with_sync_bn_train_as_one_process_on_the_whole_batch(tmp_path):
    assert gluoncv.__version__
    ranks, out2 = run(2, str(tmp_path / "ranks.npz"), "--batch-size", "4")
    assert "2 ranks, batch 4 per rank (8 in all), SyncBatchNorm" in out2, out2[-3000:]
    one, _ = run(1, str(tmp_path / "one.npz"), "--batch-size", "8", "--no-sync-bn")
    names = json.loads(str(one["names"]))
    assert json.loads(str(ranks["names"])) == names
    assert any(n.endswith("running_var") for n in names) and len(names) > 200
    assert np.all(np.isfinite(ranks["losses"])), ranks["losses"]
    np.testing.assert_allclose(ranks["losses"], one["losses"], rtol=1e-9)
    for name in names:
        np.testing.assert_allclose(ranks[name], one[name], rtol=1e-7, atol=1e-9,
                                   err_msg=name)
