"""HOROVOD_AUTOTUNE on 2 ranks: every candidate tried, results right, its log written
(tests/core/workers/autotune*.py)."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("worker,steps_per_sample", [
    ("autotune.py", "2"),            # tries every candidate, results stay right
    ("autotune_new_names.py", "1"),  # samples when no name comes round again
])
def test_autotune(tmp_path, worker, steps_per_sample):
    log = tmp_path / "autotune.csv"
    run_ranks(2, worker, [str(log)], timeout=240,
              env={"HOROVOD_AUTOTUNE": "1", "HOROVOD_AUTOTUNE_LOG": str(log),
                   "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "0",
                   "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": steps_per_sample})
