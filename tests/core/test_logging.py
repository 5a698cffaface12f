"""Logging: the 'mxhorovod' logger and the core's lines share the '[rank]<level> time
mxhorovod: message' style and HOROVOD_LOG_LEVEL's filter, quiet by default; bad settings
are refused at init(). Each case runs in a fresh single-rank process (the settings are
read at import and init)."""
import os
import re
import subprocess
import sys

import pytest

from support.paths import ROOT

TIME = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}"


def run(code, **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HOROVOD_", "PMI_", "OMPI_"))}
    full.update(PYTHONPATH=ROOT, OMP_NUM_THREADS="1", **env)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full,
                          timeout=180, cwd=ROOT)
    return proc


INIT = "import mxhorovod as hvd\nhvd.init()\n"


def test_quiet_by_default():
    proc = run(INIT + "from mxhorovod.common.log import get_logger\n"
                      "get_logger().info('not shown'); get_logger().debug('not shown')\n"
                      "hvd.shutdown()\n")
    assert proc.returncode == 0, proc.stderr
    assert "mxhorovod" not in proc.stderr and "not shown" not in proc.stderr, proc.stderr


def test_info_level_python_lines_with_rank_and_time():
    proc = run(INIT + "from mxhorovod.common.log import get_logger\n"
                      "get_logger().debug('hidden'); get_logger().warning('hello %s', 7)\n"
                      "hvd.shutdown()\n", HOROVOD_LOG_LEVEL="INFO")
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if "mxhorovod:" in l]
    assert re.fullmatch(r"\[0\]<info> %s mxhorovod: rank 0 of 1 \(local rank 0 of 1\): pid \d+ on \S+"
                        % TIME, lines[0]), lines
    assert re.fullmatch(r"\[0\]<warning> %s mxhorovod: hello 7" % TIME, lines[1]), lines
    assert "hidden" not in proc.stderr and len(lines) == 2, lines


def test_trace_level_hidden_time_and_rank_before_init():
    code = ("from mxhorovod.common.log import get_logger, TRACE\n"
            "get_logger().log(TRACE, 'before init')\n" + INIT +
            "get_logger().log(TRACE, 'after init')\nhvd.shutdown()\n"
            "get_logger().log(TRACE, 'after shutdown')\n")
    proc = run(code, HOROVOD_LOG_LEVEL="trace", HOROVOD_LOG_HIDE_TIME="1", PMI_RANK="5")
    assert proc.returncode == 0, proc.stderr
    lines = [l for l in proc.stderr.splitlines() if "mxhorovod:" in l]
    # Before init the launcher's rank; then the rank in the job (kept after shutdown).
    assert lines[0] == "[5]<trace> mxhorovod: before init", lines
    assert "[0]<trace> mxhorovod: after init" in lines, lines
    assert lines[-1] == "[0]<trace> mxhorovod: after shutdown", lines


def test_core_lines_share_the_style_and_the_filter():
    # A C++ warning (stall settings that Horovod ignores) in the same style as Python's.
    code = INIT + "hvd.shutdown()\n"
    env = dict(HOROVOD_STALL_CHECK_TIME_SECONDS="5", HOROVOD_STALL_SHUTDOWN_TIME_SECONDS="1")
    proc = run(code, **env)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[0\]<warning> %s mxhorovod: HOROVOD_STALL_SHUTDOWN_TIME_SECONDS=1\.0 is less "
                     r"than HOROVOD_STALL_CHECK_TIME_SECONDS=5\.0, will not shut down" % TIME,
                     proc.stderr, re.M), proc.stderr
    quiet = run(code, HOROVOD_LOG_LEVEL="error", **env)
    assert quiet.returncode == 0 and "mxhorovod" not in quiet.stderr, quiet.stderr


def test_bad_settings_are_refused_at_init():
    code = ("import mxhorovod as hvd\n"
            "try:\n    hvd.init()\nexcept ValueError as e:\n    print('REFUSED', e)\n")
    for var, value in (("HOROVOD_LOG_LEVEL", "verbose"), ("HOROVOD_TIMELINE_MARK_CYCLES", "maybe"),
                       ("HOROVOD_STALL_CHECK_TIME_SECONDS", "-1"), ("HOROVOD_LOG_HIDE_TIME", "2"),
                       ("HOROVOD_STALL_CHECK_DISABLE", "sure"), ("HOROVOD_CYCLE_TIME", "  "),
                       ("HOROVOD_FUSION_THRESHOLD", "5 MB")):
        proc = run(code, **{var: value})
        assert proc.returncode == 0, proc.stderr
        assert "REFUSED" in proc.stdout and var in proc.stdout and value in proc.stdout, (var, proc.stdout)


def test_numbers_with_spaces_around_are_read():
    code = INIT + "print('CYCLE', hvd.init.__module__)\nhvd.shutdown()\n"
    for value in (" 5", "5 ", " 5\t"):
        proc = run(code, HOROVOD_CYCLE_TIME=value)
        assert proc.returncode == 0 and "CYCLE" in proc.stdout, (value, proc.stderr)


def test_unwritable_timeline_is_an_error_line_not_a_failure(tmp_path):
    proc = run(INIT + "import mxnet as mx\nprint(hvd.allreduce(mx.nd.ones(2)).asnumpy())\n"
                      "hvd.shutdown()\n", HOROVOD_TIMELINE=str(tmp_path / "missing" / "t.json"))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[0\]<error> %s mxhorovod: HOROVOD_TIMELINE: cannot open the timeline file "
                     r"'.*missing/t\.json': No such file or directory; recording no timeline$" % TIME,
                     proc.stderr, re.M), proc.stderr


def test_unwritable_autotune_log_is_an_error_line_not_a_failure(tmp_path):
    # It was skipped without a word: the user found no log after the job.
    proc = run(INIT + "import mxnet as mx\nprint(hvd.allreduce(mx.nd.ones(2)).asnumpy())\n"
                      "hvd.shutdown()\n", HOROVOD_AUTOTUNE="1",
               HOROVOD_AUTOTUNE_LOG=str(tmp_path / "missing" / "a.csv"))
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[0\]<error> %s mxhorovod: HOROVOD_AUTOTUNE_LOG: cannot open the autotune "
                     r"log file '.*missing/a\.csv': No such file or directory; autotuning without "
                     r"a log$" % TIME, proc.stderr, re.M), proc.stderr


LOG_JOB = INIT + "import mxnet as mx\nprint(hvd.allreduce(mx.nd.ones(2)).asnumpy())\nhvd.shutdown()\n"


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root (chown to another uid)")
@pytest.mark.parametrize("var", ["HOROVOD_TIMELINE", "HOROVOD_AUTOTUNE_LOG"])
@pytest.mark.parametrize("taken", ["other_users_file", "other_users_link", "hard_link", "fifo"])
def test_a_name_another_user_made_first_is_not_written(tmp_path, var, taken):
    # In a shared /tmp another user can make the name first: a file of theirs (they would
    # read the log), a link or a hard link to a file of ours (it would be overwritten), a
    # FIFO that nobody reads (the open waited forever, in init() or the first allreduce).
    path, victim = tmp_path / "out", tmp_path / "victim"
    victim.write_text("keep")
    if taken == "other_users_link":
        os.symlink(str(victim), str(path))
        os.lchown(str(path), 54321, 54321)
        why = r"it is a symbolic link that belongs to uid 54321, not to this user \(uid 0\)"
    elif taken == "hard_link":
        os.link(str(victim), str(path))
        why = "it has 2 hard links"
    elif taken == "fifo":
        os.mkfifo(str(path))
        why = "it is a FIFO that nobody reads"
    else:
        path.write_text("theirs")
        os.chown(str(path), 54321, 54321)
        why = r"it belongs to uid 54321, not to this user \(uid 0\)"
    proc = run(LOG_JOB, HOROVOD_AUTOTUNE="1", **{var: str(path)})
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[0\]<error> %s mxhorovod: %s: cannot open the .* file '%s': %s; "
                     % (TIME, var, re.escape(str(path)), why), proc.stderr, re.M), proc.stderr
    assert victim.read_text() == "keep"
    if taken == "other_users_file":
        assert path.read_text() == "theirs"


@pytest.mark.parametrize("target", ["own_link", "dev_null", "existing"])
def test_the_users_own_names_are_written(tmp_path, target):
    # What fopen(path, "w") took before the checks still works: the user's own link, a
    # device (/dev/null), an existing file of the user's (emptied).
    real = tmp_path / "real.json"
    path = str(real)
    if target == "own_link":
        path = str(tmp_path / "link.json")
        os.symlink(str(real), path)
    elif target == "dev_null":
        path = "/dev/null"
    else:
        real.write_text("x" * 100000)
    proc = run(LOG_JOB, HOROVOD_TIMELINE=path)
    assert proc.returncode == 0 and "cannot open" not in proc.stderr, proc.stderr
    if target != "dev_null":
        assert real.read_text().startswith("[") and "x" not in real.read_text()[:10]


def test_single_rank_exception_is_an_ordinary_one():
    # No MPI_Abort on a job of one rank: Python's traceback and exit code 1, as without us.
    proc = run(INIT + "raise KeyError('plain')\n")
    assert proc.returncode == 1 and "KeyError: 'plain'" in proc.stderr, proc.stderr
    assert "MPI_Abort" not in proc.stderr and "ending the job" not in proc.stderr, proc.stderr


def test_mpi_started_without_thread_multiple_is_warned():
    # mpi4py initialized MPI below MPI_THREAD_MULTIPLE: our background thread makes MPI calls
    # beside the script's (Horovod warns too); with mpi4py's default level, no warning.
    code = ("import mpi4py\nmpi4py.rc.thread_level = %r\nfrom mpi4py import MPI\n" + INIT +
            "hvd.shutdown()\n")
    proc = run(code % "single")
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[0\]<warning> .*without MPI_THREAD_MULTIPLE", proc.stderr, re.M), proc.stderr
    proc = run(code % "multiple")
    assert proc.returncode == 0 and "MPI_THREAD_MULTIPLE" not in proc.stderr, proc.stderr
