"""Elastic training and preemption on a real Slurm cluster (two namespace nodes h1, h2 of
2 CPUs; mxhorovod_devtools/slurm_cluster.py), started once for the module:

- ``mxhorovodrun --min-np 1 --max-np 2`` in ``sbatch --no-kill`` with no discovery script
  trains on the allocation's nodes; a node drained meanwhile is left out at the next
  commit and the job ends on the other one;
- a job requeued as a whole (``scontrol requeue``) resumes from its last commit in
  MXHOROVOD_ELASTIC_DURABLE_DIR: no committed step lost, the same final weights as a run
  that was never stopped.

Skipped with the reason where the cluster cannot be made (not root, Slurm not installed)."""
import os
import subprocess
import sys
import threading
import time

import numpy as np

from mxhorovod_devtools.mpirun import worker_env, worker_path

PY = sys.executable
TIMEOUT = 150


def _wait_for(path, text, timeout=90):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and text in open(path).read():
            return True
        time.sleep(0.1)
    return False


def _submit(cluster, script, args, env):
    """sbatch --wait in a thread: (thread, result dict with "proc" once it ends)."""
    result = {}

    def run():
        try:
            result["proc"] = cluster.sbatch(script, args, timeout=TIMEOUT, env=env)
        except AssertionError as e:  # (timed out: reported by the test)
            result["error"] = str(e)
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, result


def _job_ids(cluster):
    return cluster.run(["squeue", "-h", "-o", "%i"], check=True).stdout.split()


def _lines(path, word):
    return [line.split() for line in open(path) if line.split()[1] == word]


def test_elastic_in_an_allocation_leaves_a_drained_node_out(cluster, tmp_path):
    log = str(tmp_path / "log")
    script = ("#!/bin/bash\n%s -m mxhorovodrun --min-np 1 --max-np 2 --network-interfaces "
              "eth0 %s %s\necho EXIT $?\n" % (PY, PY, worker_path("elastic_train.py")))
    thread, result = _submit(cluster, script, ["-N2", "--ntasks-per-node=1", "--no-kill"],
                             cluster.env({"ELASTIC_LOG": log, "ELASTIC_STEP_SLEEP": "0.2"}))
    try:
        assert _wait_for(log, "COMMIT 0"), open(log).read() if os.path.exists(log) else "no log"
        cluster.scontrol("update", "nodename=h2", "state=drain", "reason=mxhorovod-test")
        thread.join(TIMEOUT)
    finally:
        cluster.scontrol("update", "nodename=h2", "state=resume")
    proc = result.get("proc")
    assert proc is not None, result.get("error")
    out = proc.job_output
    assert "EXIT 0" in out, out[-6000:]
    assert "job 0 on 2 ranks: h1:1,h2:1" in out and "job 1 on 1 ranks: h1:1" in out, out[-6000:]
    text = open(log).read()
    assert "START 0 2 0" in text and "RESET 1 1" in text and "END 1" in text, text[-3000:]


def test_a_requeued_job_resumes_from_its_durable_commit(cluster, tmp_path):
    log, durable = str(tmp_path / "log"), str(tmp_path / "durable")
    env = cluster.env({"REQUEUE_LOG": log, "MXHOROVOD_ELASTIC_DURABLE_DIR": durable})
    script = ("#!/bin/bash\n%s -m mxhorovodrun --network-interfaces eth0 %s %s\necho EXIT $?\n"
              % (PY, PY, worker_path("requeue_train.py")))
    thread, result = _submit(cluster, script, ["-N2", "--ntasks-per-node=1", "--requeue"], env)
    assert _wait_for(log, " COMMIT 4\n"), open(log).read() if os.path.exists(log) else "no log"
    [job] = _job_ids(cluster)
    requeued = time.time()
    cluster.scontrol("requeue", job)
    thread.join(TIMEOUT)
    proc = result.get("proc")
    assert proc is not None, result.get("error")
    assert "EXIT 0" in proc.job_output, proc.job_output[-6000:]
    starts = _lines(log, "START")
    assert [s[2:4] for s in starts] == [["0", "2"], ["1", "2"]], open(log).read()
    # No committed step lost: the second run starts from the last commit of the first.
    first_run = [int(c[2]) for c in _lines(log, "COMMIT") if float(c[0]) < float(starts[1][0])]
    assert int(starts[1][4]) == max(first_run) >= 4, open(log).read()
    print("requeue to training again: %.1f s" % (float(starts[1][0]) - requeued))
    assert [f for _, _, files in os.walk(durable) for f in files] == []  # removed at the end
    # The same weights as one process that was never stopped (identical data on the ranks).
    ref_log = str(tmp_path / "ref")
    subprocess.run([PY, worker_path("requeue_train.py")], check=True, timeout=120,
                   env=worker_env({"REQUEUE_LOG": ref_log, "STEP_SLEEP": "0"}),
                   stdout=subprocess.DEVNULL)
    assert np.allclose(np.load(log + ".npy"), np.load(ref_log + ".npy"), rtol=1e-5, atol=1e-6)
