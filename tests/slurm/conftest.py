"""The Slurm cluster of the modules that need one (mxhorovod_devtools/slurm_cluster.py):
made once per module, torn down at its end, skipped with the reason where it cannot be
made (not root, Slurm not installed)."""
import pytest

from mxhorovod_devtools.slurm_cluster import SlurmCluster, SlurmUnavailable


@pytest.fixture(scope="module")
def cluster():
    """Two Slurm nodes h1, h2 of 2 CPUs, for the whole module, torn down at its end."""
    try:
        with SlurmCluster(nodes=2, cpus=2) as made:
            yield made
    except SlurmUnavailable as e:
        pytest.skip("no Slurm cluster: %s" % e)
