"""Durable commits (MXHOROVOD_ELASTIC_DURABLE_DIR): a job killed as a whole resumes from
its last commit in the next run, as after a Slurm requeue (elastic/workers/
durable_resume.py says what each run checks on every rank)."""
import os
import subprocess
import sys

from mxhorovod_devtools.mpirun import run_ranks, worker_env, worker_path

STEPS, DIE_AFTER = 6, 4


def test_a_job_killed_as_a_whole_resumes_from_its_last_commit(tmp_path):
    ref = str(tmp_path / "ref.npy")
    env = {"MXHOROVOD_ELASTIC_DURABLE_DIR": str(tmp_path / "ref"), "RESULT": ref}
    run_ranks(2, "durable_resume.py", ["reference", STEPS], env=env, timeout=120)
    env["MXHOROVOD_ELASTIC_DURABLE_DIR"] = str(tmp_path / "run")
    died = run_ranks(2, "durable_resume.py", ["die", STEPS, DIE_AFTER], env=env, timeout=120,
                     expect_ok=False)
    assert died.returncode != 0, died.stdout[-4000:]
    held = sorted(os.listdir(tmp_path / "run" / "durable"))
    assert held == ["commit-0-%d" % DIE_AFTER], held  # one file, synced, the older removed
    # A damaged commit: an error naming it and the variable on every rank, no hang.
    path = tmp_path / "run" / "durable" / held[0]
    whole = path.read_bytes()
    path.write_bytes(whole[:500])
    bad = run_ranks(2, "durable_resume.py", ["resume", STEPS, DIE_AFTER], env=env, timeout=120,
                    expect_ok=False)
    assert bad.returncode != 0 and bad.stdout.count(
        "could not load the commit %s (MXHOROVOD_ELASTIC_DURABLE_DIR=" % path) >= 2, \
        bad.stdout[-4000:]
    path.write_bytes(whole)
    run_ranks(2, "durable_resume.py", ["resume", STEPS, DIE_AFTER], env=env, timeout=120)


def test_a_folder_other_users_can_write_is_refused(tmp_path):
    folder = tmp_path / "open"
    folder.mkdir()
    os.chmod(folder, 0o777)
    env = worker_env({"MXHOROVOD_ELASTIC_DURABLE_DIR": str(folder)})
    proc = subprocess.run([sys.executable, worker_path("durable_resume.py"), "badfolder", "2"],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "RANK 0 OK" in proc.stdout, proc.stdout[-4000:]
