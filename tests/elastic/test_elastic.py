"""hvd.elastic's states, store and sampler (elastic/workers/elastic_state.py), on 1, 2 and 3
ranks: commit / restore / sync bit-identical on every rank, the commit store's round trip,
ElasticSampler's resumption on another number of ranks."""
import subprocess
import sys

import pytest

from mxhorovod_devtools.mpirun import run_ranks, worker_env, worker_path


def test_states_one_process():
    proc = subprocess.run([sys.executable, worker_path("elastic_state.py")], env=worker_env(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "RANK 0 OK" in proc.stdout, proc.stdout[-4000:]


@pytest.mark.parametrize("np_", [2, 3])
def test_states_multi_rank(np_):
    run_ranks(np_, "elastic_state.py", timeout=180)


def test_blacklist_cooldown_doubles_up_to_the_bound():
    from mxhorovodrun.elastic_driver import Blacklist
    now = [100.0]
    b = Blacklist((10, 25), clock=lambda: now[0])
    b.add("h2", "rank 2 was killed by SIGKILL")
    assert b.blocked("h2") and not b.blocked("h1")
    now[0] += 11.1  # 10 s plus at most 10% jitter
    assert not b.blocked("h2")
    b.add("h2", "again")
    now[0] += 19.9
    assert b.blocked("h2")  # 20 s the second time
    now[0] += 2.2
    assert not b.blocked("h2")
    b.add("h2", "a third time")  # 40 s, bounded by 25
    now[0] += 27.6
    assert not b.blocked("h2")
    forever = Blacklist(None, clock=lambda: now[0])
    forever.add("h3", "lost")
    now[0] += 1e9
    assert forever.blocked("h3")


def test_elastic_flags_defaults():
    from mxhorovodrun.args import parse_args
    args = parse_args(["--min-np", "2", "--host-discovery-script", "d.sh", "python", "t.py"],
                      environ={"HOROVOD_ELASTIC_TIMEOUT": "7"})
    assert (args.num_proc, args.min_np, args.max_np, args.elastic_timeout) == (2, 2, None, 7)
    args = parse_args(["-np", "4", "--host-discovery-script", "d.sh", "python", "t.py"],
                      environ={})
    assert (args.num_proc, args.min_np) == (4, 4)


def test_elastic_script_under_plain_mpirun_runs_fixed_size(tmp_path):
    # No driver: one warning (rank 0), the whole training at size 2, nothing written to a
    # commit directory.
    log = tmp_path / "log"
    proc = run_ranks(2, "elastic_train.py", timeout=180,
                     env={"ELASTIC_LOG": str(log),
                          "MXHOROVOD_ELASTIC_COMMIT_DIR": str(tmp_path / "commits")})
    assert proc.stdout.count("hvd.elastic.run: not started by mxhorovodrun's elastic mode "
                             "(--host-discovery-script, or --min-np in a Slurm allocation); "
                             "running as a fixed-size job of 2 ranks, with no reset") == 1, proc.stdout[-3000:]
    lines = log.read_text().split("\n")
    assert lines[0] == "START 0 2 0" and "END 0" in lines
    assert sum(1 for line in lines if line.startswith("STEP")) == 3 * 96 // 8
    assert not (tmp_path / "commits").exists()
