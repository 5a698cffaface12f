"""mxhorovodrun/startup.py: --start-timeout, the checks of mpirun and of every remote host
within one deadline."""
import os


from mxhorovodrun.launch import main
from mxhorovodrun.mpi import HYDRA
from mxhorovodrun.startup import Deadline, check_hosts, remote_hosts
from support.launcher import VERSIONS, fake_mpirun, starts


def _standin(tmp_path, body):
    """An ssh stand-in: logs its arguments, then runs ``body`` (bash)."""
    log = tmp_path / "standin.log"
    path = tmp_path / "standin.sh"
    path.write_text('#!/bin/bash\necho "$*" >> %s\n%s\n' % (log, body))
    path.chmod(0o755)
    return str(path), log


def test_start_timeout_host_checks(tmp_path):
    assert remote_hosts([("localhost", 2), ("127.0.0.1", 1), (os.uname().nodename, 1),
                         ("node7", 1)]) == ["node7"]
    # Reached like hydra reaches them: -x, ssh's port and key, the host, a command.
    ok, log = _standin(tmp_path, 'exit 0')
    assert check_hosts([("h1", 1), ("h2", 2)], Deadline(20), ssh_command=ok, ssh_port=2222,
                       ssh_identity_file="/k/id") == []
    assert sorted(log.read_text().splitlines()) == ["-x -p 2222 -i /k/id h1 true",
                                                    "-x -p 2222 -i /k/id h2 true"]
    bad, _ = _standin(tmp_path, '[[ "$2" == h2 ]] && { echo "no route to $2" >&2; exit 255; }; exit 0')
    problems = check_hosts([("h1", 1), ("h2", 1)], Deadline(20), ssh_command=bad)
    assert len(problems) == 1 and problems[0].startswith("host h2 is not reachable") \
        and "exited with 255: no route to h2" in problems[0], problems
    # Hosts are checked at once: two hanging hosts take one timeout, not two.
    slow, _ = _standin(tmp_path, 'exec sleep 30')
    import time
    t0 = time.monotonic()
    problems = check_hosts([("h1", 1), ("h2", 1)], Deadline(2), ssh_command=slow)
    assert time.monotonic() - t0 < 10
    assert problems == ["host h%d did not answer within --start-timeout 2 s (%s -x h%d true)"
                        % (i, slow, i) for i in (1, 2)], problems


def test_start_timeout_in_main(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MXHOROVOD_MPIRUN", fake_mpirun(tmp_path, VERSIONS[HYDRA]))
    bad, log = _standin(tmp_path, 'exit 255')
    started = []
    argv = ["-np", "2", "-H", "h1,h2", "--ssh-command", bad, "python", "t.py"]
    # No timeout given: no check (as before), mpirun starts.
    assert main(argv, **starts(started)) == 0 and len(started) == 1
    assert not log.exists()
    # With one: the unreachable hosts are named and nothing starts.
    assert main(["--start-timeout", "20"] + argv, **starts(started)) == 1
    err = capsys.readouterr().err
    assert "mxhorovodrun: error: host h1 is not reachable" in err and "host h2 is not reachable" in err
    assert len(started) == 1
    # ... also when given by HOROVOD_START_TIMEOUT.
    monkeypatch.setenv("HOROVOD_START_TIMEOUT", "20")
    assert main(argv, **starts(started)) == 1 and len(started) == 1
    monkeypatch.delenv("HOROVOD_START_TIMEOUT")
    # Only this host: nothing to check.
    assert main(["--start-timeout", "20", "-np", "2", "-H", "localhost:2", "python", "t.py"],
                **starts(started)) == 0 and len(started) == 2
    # Identifying mpirun counts too.
    monkeypatch.setenv("FAKE_VERSION_SLEEP", "30")
    import time
    t0 = time.monotonic()
    assert main(["--start-timeout", "1", "-np", "2", "python", "t.py"],
                **starts(started)) == 1
    assert time.monotonic() - t0 < 15
    assert "--version did not answer within" in capsys.readouterr().err and len(started) == 2
