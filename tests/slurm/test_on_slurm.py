"""mxhorovod on a real Slurm cluster (Slurm 22.05: slurmctld, one slurmd per namespace
host h1, h2 of 2 CPUs each; mxhorovod_devtools/slurm_cluster.py), started once for the
module: mxhorovodrun in an sbatch script without -np (every rank's size, rank, local rank,
and OMP_NUM_THREADS worked out per node), -np beyond the allocation refused, ``srun
--mpi=pmi2`` launching the ranks directly, ``srun --mpi=none`` refused on every task, and
MXHOROVOD_SLURM_SINGLE_TASKS=1 letting it through. Data between nodes crosses the veths
(UCX over eth0). Skipped with the reason where the cluster cannot be made (not root, Slurm
not installed: ``apt-get install -y slurmctld slurmd slurm-client munge libpmix-dev``)."""
import sys


from mxhorovod_devtools.mpirun import worker_path

WORLD = worker_path("slurm_world.py")
PY = sys.executable
TIMEOUT = 150


def _env(cluster, **extra):
    """The jobs' environment with OMP_NUM_THREADS unset: the launcher chooses it."""
    env = cluster.env(extra)
    env.pop("OMP_NUM_THREADS", None)
    return env


def _batch(cluster, body, args, env=None):
    proc = cluster.sbatch("#!/bin/bash\n" + body + "\n", args, timeout=TIMEOUT,
                          env=env or _env(cluster))
    proc.text = "sbatch %s: exit %d\n%s\n-- job output --\n%s" % (
        " ".join(args), proc.returncode, proc.stdout, proc.job_output[-8000:])
    return proc


def _all_ok(proc, n):
    out = getattr(proc, "job_output", proc.stdout)
    assert proc.returncode == 0, getattr(proc, "text", out)
    for r in range(n):
        assert "RANK %d OK" % r in out, "rank %d did not finish\n%s" % (
            r, getattr(proc, "text", out))


def test_sbatch_mxhorovodrun_takes_the_allocations_tasks_2x2(cluster):
    # No -np: 4 tasks; 2 ranks on each 2-CPU node get 1 thread each.
    proc = _batch(cluster, "%s -m mxhorovodrun %s %s h1,h1,h2,h2 1,1,1,1" % (PY, PY, WORLD),
                  ["-N2", "--ntasks-per-node=2"])
    _all_ok(proc, 4)
    assert "outside the nodes" not in proc.job_output, proc.text  # it runs on h1


def test_sbatch_threads_are_worked_out_on_each_node(cluster):
    # 3 tasks: 2 on h1, 1 on h2, whole nodes. Each node's own CPUs over its own ranks: h1's
    # ranks 1 thread each, h2's rank 2 (the launcher alone can only give every rank 1).
    proc = _batch(cluster, "%s -m mxhorovodrun %s %s h1,h1,h2 1,1,2" % (PY, PY, WORLD),
                  ["-N2", "-n3", "--exclusive"])
    _all_ok(proc, 3)


def test_sbatch_np_beyond_the_allocation_is_refused(cluster):
    proc = _batch(cluster, "%s -m mxhorovodrun -np 3 %s %s h1,h2,h1 -; echo EXIT $?"
                  % (PY, PY, WORLD), ["-N2", "--ntasks-per-node=1"])
    assert "EXIT 2" in proc.job_output, proc.text
    assert "-np 3 is more than the 2 tasks of Slurm job %s (nodes h[1-2], tasks per node " \
           "1(x2))" % proc.job_id in proc.job_output, proc.text
    assert "--oversubscribe" in proc.job_output and "RANK" not in proc.job_output, proc.text


def test_sbatch_script_running_python_once_is_not_refused(cluster):
    # The batch step has no SLURM_STEP_NUM_TASKS: a world of 1 there is what was asked.
    proc = _batch(cluster, "%s %s $(hostname) -" % (PY, WORLD), ["-N1", "-n2"])
    _all_ok(proc, 1)


def test_salloc_from_the_login_side_with_network_interfaces(cluster):
    # mxhorovodrun here, outside the nodes: the proxies connect back to it on the bridge.
    proc = cluster.run(["salloc", "-N2", "--ntasks-per-node=1", "--exclusive", PY, "-m",
                        "mxhorovodrun", "--network-interfaces", cluster.hosts.bridge, PY, WORLD,
                        "h1,h2", "2,2"], timeout=TIMEOUT, env=_env(cluster))
    _all_ok(proc, 2)


def test_srun_pmi2_launches_the_ranks_directly(cluster):
    proc = cluster.srun(["-N2", "-n4", "--mpi=pmi2", PY, WORLD, "h1,h1,h2,h2", "-"],
                        timeout=TIMEOUT, env=cluster.env())
    _all_ok(proc, 4)


def test_srun_mpi_none_is_refused_on_every_task(cluster):
    proc = cluster.srun(["-N2", "-n2", "--mpi=none", PY, WORLD, "h1,h2", "-"],
                        timeout=TIMEOUT, env=cluster.env())
    assert proc.returncode != 0, proc.stdout
    for task in range(2):
        assert "RuntimeError: hvd.init(): this process is task %d of the 2 tasks of Slurm " \
               "step" % task in proc.stdout, proc.stdout
    assert proc.stdout.count("Launch with srun --mpi=pmi2") == 2, proc.stdout
    assert "RANK" not in proc.stdout, proc.stdout


def test_srun_mpi_none_single_tasks_setting_lets_them_through(cluster):
    # Each task is a job of its own (size 1), as asked.
    proc = cluster.srun(["-N2", "-n2", "--mpi=none", "bash", "-c",
                         '%s %s $(hostname) - | sed "s/^/TASK $SLURM_PROCID /"' % (PY, WORLD)],
                        timeout=TIMEOUT, env=cluster.env({"MXHOROVOD_SLURM_SINGLE_TASKS": "1"}))
    assert proc.returncode == 0, proc.stdout
    assert "TASK 0 RANK 0 OK on h1" in proc.stdout and "TASK 1 RANK 0 OK on h2" in proc.stdout, \
        proc.stdout

