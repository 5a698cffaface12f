"""An elastic run on a host shared with another local user who attacks its commits
(tests/elastic/workers/elastic_intruder.py): that user makes the shared commit folders
first and plants a commit whose unpickling runs code in every job folder it can reach. The
run must neither use those folders nor stop: it resets from its own commits. Needs root
(a second Unix user is made for the test, and the hosts need namespaces)."""
import os
import pickle
import pwd
import shutil
import struct
import subprocess
import tempfile

import pytest

from mxhorovod_devtools.elastic_hosts import LocalHosts, unavailable
from mxhorovod_devtools.mpirun import worker_path
from test_elastic_driver import check_training, run

INTRUDER = "mxh-intruder"
SHARED = "/dev/shm"


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, ("touch %s" % self.marker,))


@pytest.fixture
def intruder():
    """A second Unix user (made for the test, removed after)."""
    why = unavailable()
    if why or shutil.which("useradd") is None:
        pytest.skip(why or "no useradd")
    made = subprocess.run(["useradd", "--system", "--no-create-home", "--shell",
                           "/usr/sbin/nologin", INTRUDER], capture_output=True, text=True)
    assert made.returncode in (0, 9), made.stderr  # 9: it exists (a test before failed)
    yield pwd.getpwnam(INTRUDER)
    subprocess.run(["userdel", INTRUDER], capture_output=True)


def _own_folders():
    uid = os.geteuid()
    return [os.path.join(SHARED, n) for n in os.listdir(SHARED)
            if n.startswith("mxhorovod-elastic") and os.lstat(os.path.join(SHARED, n)).st_uid == uid]


def test_another_users_folders_and_planted_commits_are_ignored(intruder, tmp_path):
    # This user's own default folders (earlier runs) go aside, so that the intruder is first.
    aside = {path: path + ".aside-%d" % os.getpid() for path in _own_folders()}
    for path, moved in aside.items():
        os.rename(path, moved)
    hosts = LocalHosts()
    files = tempfile.mkdtemp(prefix="mxh-intruder-")  # the intruder reads the commit here
    os.chmod(files, 0o755)
    marker = str(tmp_path / "planted-commit-ran")
    planted = os.path.join(files, "planted")
    head = pickle.dumps(_RunsCode(marker))
    with open(planted, "wb") as f:
        f.write(struct.pack("<Q", len(head)) + head)
    os.chmod(planted, 0o644)
    attack = subprocess.Popen(
        ["setpriv", "--reuid=%d" % intruder.pw_uid, "--regid=%d" % intruder.pw_gid,
         "--clear-groups", "/usr/bin/python3", worker_path("elastic_intruder.py"), planted,
         "300", str(os.geteuid())], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert attack.stdout.readline().strip() == "READY"
        # Both hosts keep commits in this machine's /dev/shm (no MXHOROVOD_ELASTIC_COMMIT_DIR).
        hosts.env = lambda: {}
        hosts.set_hosts("ha:1\nhb:1\n")
        code, out = run(hosts, ["-np", "2", "--min-np", "1"], ELASTIC_KILL="0:1:7")
        assert code == 0, out[-6000:]
        assert "host hb left out: rank 1 was killed by SIGKILL" in out, out[-4000:]
        jobs = check_training(hosts, out, [2, 1])
        assert jobs[1]["loaded"] == jobs[0]["commits"][-1] > 0
        assert not os.path.exists(marker)
        first = os.path.join(SHARED, "mxhorovod-elastic-%d" % os.geteuid())
        assert "passed over %s (it belongs to uid %d" % (first, intruder.pw_uid) in out, out[-4000:]
        assert "commits go to %s.2" % first in out, out[-4000:]
    finally:
        attack.kill()
        attack.wait()
        hosts.close()
        shutil.rmtree(files, ignore_errors=True)
        for name in os.listdir(SHARED):
            path = os.path.join(SHARED, name)
            if name.startswith("mxhorovod") and os.lstat(path).st_uid == intruder.pw_uid:
                shutil.rmtree(path, ignore_errors=True)
        for path in _own_folders():
            if path not in aside.values():
                shutil.rmtree(path, ignore_errors=True)
        for path, moved in aside.items():
            os.rename(moved, path)
