"""hvd.elastic's states, store and sampler (tests/workers/elastic_state.py), on 1, 2 and 3
ranks: commit / restore / sync bit-identical on every rank, the commit store's round trip,
ElasticSampler's resumption on another number of ranks."""
import subprocess
import sys

import pytest

from mpirun import run_ranks, worker_env, worker_path


def test_states_one_process():
    proc = subprocess.run([sys.executable, worker_path("elastic_state.py")], env=worker_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "RANK 0 OK" in proc.stdout, proc.stdout[-4000:]


@pytest.mark.parametrize("np_", [2, 3])
def test_states_multi_rank(np_):
    run_ranks(np_, "elastic_state.py", timeout=180)
