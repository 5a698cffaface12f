"""mxhorovodrun/settings.py: the ranks' environment from the flags (HOROVOD_* variables as
horovodrun sets them, -x, OMP_NUM_THREADS by the usable cores, --tcp), the flags that do
nothing here warned, and the settings reaching every rank of a real job."""
import pytest

from mxhorovodrun.args import build_parser
from mxhorovodrun.cores import usable_cores
from mxhorovodrun.launch import main
from mxhorovodrun.mpi import HYDRA, INTEL_MPI, OPEN_MPI
from support.launcher import VERSIONS, fake_mpirun, plan, run_env_worker, starts


def test_horovod_variables_from_flags(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, [
        "-np", "2", "--fusion-threshold-mb", "32", "--cycle-time-ms", "2.5",
        "--cache-capacity", "0", "--timeline-filename", "/tmp/tl.json", "--timeline-mark-cycles",
        "--no-stall-check", "--stall-check-warning-time-seconds", "30",
        "--stall-check-shutdown-time-seconds", "90", "--log-level", "DEBUG",
        "--log-without-timestamp", "--hierarchical-allreduce", "--autotune",
        "--autotune-log-file", "/tmp/at.csv", "--autotune-warmup-samples", "2",
        "--autotune-steps-per-sample", "5", "--autotune-bayes-opt-max-samples", "9",
        "-x", "FOO=bar baz", "python", "t.py"])
    want = {"HOROVOD_FUSION_THRESHOLD": "33554432", "HOROVOD_CYCLE_TIME": "2.5",
            "HOROVOD_CACHE_CAPACITY": "0", "HOROVOD_TIMELINE": "/tmp/tl.json",
            "HOROVOD_TIMELINE_MARK_CYCLES": "1", "HOROVOD_STALL_CHECK_DISABLE": "1",
            "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "90",
            "HOROVOD_LOG_LEVEL": "DEBUG", "HOROVOD_LOG_HIDE_TIME": "1",
            "HOROVOD_HIERARCHICAL_ALLREDUCE": "1", "HOROVOD_AUTOTUNE": "1",
            "HOROVOD_AUTOTUNE_LOG": "/tmp/at.csv", "HOROVOD_AUTOTUNE_WARMUP_SAMPLES": "2",
            "HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE": "5", "HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES": "9",
            "FOO": "bar baz"}
    assert {k: env.get(k) for k in want} == want
    # Flags this build does not act on are named, not silently accepted.
    assert len(notes) == 1, notes
    assert "--autotune-bayes-opt-max-samples" in notes[0] and "grid search" in notes[0]
    # Autotune's details without --autotune set nothing (horovodrun's rule).
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--autotune-log-file", "x.csv", "python", "t.py"])
    assert "HOROVOD_AUTOTUNE_LOG" not in env and "HOROVOD_AUTOTUNE" not in env
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--no-hierarchical-allreduce", "python", "t.py"])
    assert env["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "0" and notes == []
    # The level in any case, as HOROVOD_LOG_LEVEL takes it (horovodrun lists it in capitals).
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--log-level", "info", "python", "t.py"])
    assert env["HOROVOD_LOG_LEVEL"] == "INFO"


def test_unset_flags_keep_the_environment(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"],
                         environ={"HOROVOD_CYCLE_TIME": "7"})
    assert env["HOROVOD_CYCLE_TIME"] == "7"
    assert not [k for k in env if k.startswith("HOROVOD_") and k != "HOROVOD_CYCLE_TIME"]
    assert notes == []
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--cycle-time-ms", "3", "python", "t.py"],
                     environ={"HOROVOD_CYCLE_TIME": "7"})
    assert env["HOROVOD_CYCLE_TIME"] == "3.0"
    # --timeline-mark-cycles alone (no file) sets nothing, as in horovodrun.
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "--timeline-mark-cycles", "python", "t.py"])
    assert "HOROVOD_TIMELINE_MARK_CYCLES" not in env


@pytest.mark.parametrize("argv,cores,want", [
    (["-np", "4"], 8, "2"),               # 4 local ranks share 8 cores
    (["-np", "3"], 8, "2"),               # rounded down
    (["-np", "4"], 2, "1"),               # never below 1
    (["-np", "1"], 16, "16"),
    (["-np", "3", "-H", "a:2,b:2"], 8, "4"),   # at most 2 ranks on a host
    (["-np", "5", "-H", "a:4,b:4"], 8, "2"),   # a gets 4 of the 5
])
def test_omp_num_threads_rule(tmp_path, argv, cores, want):
    _, env, _ = plan(tmp_path, HYDRA, argv + ["python", "t.py"], cores=cores)
    assert env["OMP_NUM_THREADS"] == want


def test_omp_num_threads_set_by_user_is_kept(tmp_path):
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "4", "python", "t.py"], cores=8,
                     environ={"OMP_NUM_THREADS": "3"})
    assert env["OMP_NUM_THREADS"] == "3"


def test_tcp_flag(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--tcp", "python", "t.py"])
    assert env["UCX_TLS"] == "tcp,self" and notes == []
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert "UCX_TLS" not in env
    # The user's own choice is kept, and said so.
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--tcp", "-x", "UCX_TLS=tcp", "python", "t.py"])
    assert env["UCX_TLS"] == "tcp" and notes == ["--tcp: UCX_TLS=tcp is already set; kept"]
    for flavour in (OPEN_MPI, INTEL_MPI):
        _, env, notes = plan(tmp_path, flavour, ["-np", "2", "--tcp", "python", "t.py"])
        assert "UCX_TLS" not in env
        assert len(notes) == 1 and notes[0].startswith("--tcp: no effect with %s" % flavour), notes


def test_library_flags_warn_that_they_do_nothing(tmp_path):
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--mpi-threads-disable",
                                           "--num-nccl-streams", "4", "python", "t.py"])
    assert env["HOROVOD_MPI_THREADS_DISABLE"] == "1" and env["HOROVOD_NUM_NCCL_STREAMS"] == "4"
    assert len(notes) == 2, notes
    assert notes[0].startswith("--mpi-threads-disable: no effect") and "MPI_THREAD_MULTIPLE" in notes[0]
    assert notes[1].startswith("--num-nccl-streams: no effect") and "no NCCL" in notes[1]
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--no-mpi-threads-disable", "python", "t.py"])
    assert env["HOROVOD_MPI_THREADS_DISABLE"] == "0" and notes == []


def test_horovodrun_flags_without_effect_set_their_variables_and_warn(tmp_path):
    # horovodrun 0.28.1's --thread-affinity (acted on: tests/test_host_cores.py),
    # --gloo-timeout-seconds, --[no-]hierarchical-allgather and --[no-]torus-allreduce: a
    # horovodrun command line runs, with a warning per flag that does nothing here (it was
    # "unrecognized arguments").
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--thread-affinity", "0, 1",
                                           "--gloo-timeout-seconds", "30",
                                           "--hierarchical-allgather", "--no-torus-allreduce",
                                           "python", "t.py"])
    assert (env["HOROVOD_THREAD_AFFINITY"], env["HOROVOD_GLOO_TIMEOUT_SECONDS"],
            env["HOROVOD_HIERARCHICAL_ALLGATHER"], env["HOROVOD_TORUS_ALLREDUCE"]) == ("0,1", "30", "1", "0")
    # --no-torus-allreduce asks for what mxhorovod does: no warning (as --no-mpi-threads-disable).
    assert [n.split(":")[0] for n in notes] == ["--gloo-timeout-seconds",
                                               "--hierarchical-allgather"], notes
    assert all(": no effect" in n for n in notes), notes
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "--torus-allreduce", "python", "t.py"])
    assert env["HOROVOD_TORUS_ALLREDUCE"] == "1"
    assert len(notes) == 1 and notes[0].startswith("--torus-allreduce: no effect"), notes
    _, env, notes = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"])
    assert notes == [] and not {"HOROVOD_THREAD_AFFINITY", "HOROVOD_GLOO_TIMEOUT_SECONDS",
                                "HOROVOD_HIERARCHICAL_ALLGATHER", "HOROVOD_TORUS_ALLREDUCE"} & set(env)
    help_text = build_parser().format_help()
    for flag in ("--thread-affinity", "--gloo-timeout-seconds", "--hierarchical-allgather",
                 "--torus-allreduce", "--min-np", "--jsrun", "--config-file"):
        assert flag in help_text, flag


def test_library_flags_warning_reaches_stderr(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    started = []
    assert main(["-np", "2", "--mpi-threads-disable", "--num-nccl-streams", "2", "python", "t.py"],
                **starts(started)) == 0
    err = capsys.readouterr().err.splitlines()
    assert sum(line.startswith("mxhorovodrun: warning: --mpi-threads-disable: no effect")
               for line in err) == 1, err
    assert sum(line.startswith("mxhorovodrun: warning: --num-nccl-streams: no effect")
               for line in err) == 1, err
    assert len(started) == 1


def test_end_to_end_settings_reach_every_rank():
    want = {"size": 2, "init_error": None, "env": {
        "HOROVOD_FUSION_THRESHOLD": str(4 * 1024 * 1024), "HOROVOD_CYCLE_TIME": "2.0",
        "HOROVOD_CACHE_CAPACITY": "16", "HOROVOD_STALL_CHECK_DISABLE": "1",
        "HOROVOD_STALL_CHECK_TIME_SECONDS": "30", "HOROVOD_LOG_LEVEL": "INFO",
        "OMP_NUM_THREADS": str(max(1, usable_cores() // 2)), "FOO": "bar"}}
    run_env_worker(["--fusion-threshold-mb", "4", "--cycle-time-ms", "2", "--cache-capacity", "16",
                     "--no-stall-check", "--stall-check-warning-time-seconds", "30",
                     "--log-level", "INFO", "-x", "FOO=bar"], want, env={"OMP_NUM_THREADS": ""})


def test_end_to_end_core_reads_the_flag():
    # The core refuses a cycle time above a minute: its error on every rank proves that
    # --cycle-time-ms reached it.
    want = {"size": 2, "init_error": "HOROVOD_CYCLE_TIME=70000", "env": {"HOROVOD_CYCLE_TIME": "70000.0"}}
    run_env_worker(["--cycle-time-ms", "70000"], want)


def test_end_to_end_tcp_reaches_the_ranks():
    want = {"size": 2, "init_error": None, "env": {"UCX_TLS": "tcp,self"}}
    run_env_worker(["--tcp"], want, env={"UCX_TLS": ""})
