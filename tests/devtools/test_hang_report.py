"""tests/hang_report.py: a timed-out job's message names its processes and where they wait."""
import os
import signal
import subprocess
import sys
import time

import pytest

from mxhorovod_devtools import hang_report
from mxhorovod_devtools.mpirun import run_ranks


def test_the_report_names_every_process_below_the_launcher_and_its_wait():
    proc = subprocess.Popen([sys.executable, "-c", "import os, time; os.fork(); time.sleep(60)"],
                            start_new_session=True)
    try:
        for _ in range(100):  # both processes asleep
            pids = hang_report.descendants(proc.pid)
            if len(pids) == 2 and all("S" in open("/proc/%d/stat" % p).read().rpartition(")")[2][:3]
                                      for p in pids):
                break
            time.sleep(0.1)
        text = hang_report.report(proc.pid, budget=30)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in pids:
        assert "pid %d [S] %s -c import os, time;" % (pid, sys.executable) in text, text
    assert text.count("waits in") == 2, text
    assert hang_report.descendants(proc.pid) == []


def test_a_timed_out_job_says_where_its_ranks_waited(tmp_path):
    script = tmp_path / "sleeps.py"
    script.write_text("import time\ntime.sleep(60)\n")
    with pytest.raises(AssertionError) as err:
        run_ranks(2, str(script), timeout=5)
    text = str(err.value)
    assert "timed out after 5s" in text and "the job's processes when it timed out" in text, text
    assert text.count(str(script)) >= 4, text  # the command, mpirun's and both ranks' lines
    assert "hydra_pmi_proxy" in text, text
