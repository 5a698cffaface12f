"""mxhorovod_devtools/slurm_cluster.py itself: a cluster answers, and leaves nothing behind
(no daemon, no namespace, no file); without root it says why instead of starting."""
import os
import subprocess

import pytest

from mxhorovod_devtools import slurm_cluster
from mxhorovod_devtools.slurm_cluster import SlurmCluster, SlurmUnavailable


def _gone(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rpartition(")")[2].split()[0] == "Z"
    except OSError:
        return True


def test_cluster_runs_a_step_and_tears_everything_down():
    try:
        with SlurmCluster(nodes=1, cpus=1) as cluster:
            pids = [p.pid for _, p in cluster._procs]
            tmp, netns = cluster.tmp, list(cluster.hosts.netns.values())
            proc = cluster.srun(["-n1", "bash", "-c", "echo $(hostname) $SLURM_CPUS_ON_NODE"],
                                timeout=60)
            assert proc.returncode == 0 and proc.stdout.split() == ["h1", "1"], proc.stdout
    except SlurmUnavailable as e:
        pytest.skip("no Slurm cluster: %s" % e)
    assert not os.path.exists(tmp)
    left = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE, text=True,
                          timeout=30).stdout
    assert not [ns for ns in netns if ns in left], left
    assert all(_gone(pid) for pid in pids), pids


def test_not_root_is_a_reason_not_a_failure(monkeypatch):
    monkeypatch.setattr(slurm_cluster.os, "geteuid", lambda: 1000)
    assert "needs root" in slurm_cluster.unavailable_reason()
    with pytest.raises(SlurmUnavailable, match="needs root"):
        SlurmCluster().__enter__()
