"""Elastic training across network-namespace hosts (tests/netns_hosts.py), every rank
started by mxhorovodrun's elastic driver from this machine over the ssh stand-in, each host
with a private commit directory (a mount namespace around the stand-in: a design that
needs a shared disk fails here), UCX's TCP between hosts. Checked against a one-process
replay as in tests/test_elastic_driver.py."""
import os
import signal
import subprocess
import sys

from mxhorovod_devtools.elastic_hosts import LocalHosts
from mxhorovod_devtools.mpirun import REPO, worker_env, worker_path
from test_elastic_driver import check_training


def _run_driver(netns, local, env_extra, flags=()):
    """mxhorovodrun's elastic driver over the 2 netns hosts (TCP between them, 4 ranks,
    --min-np 2) running elastic/workers/elastic_train.py; its output, after exit 0 within
    240 s (a hang fails the test) with every host check answered by the driver."""
    env = worker_env(dict(local.env(), ELASTIC_LOG=os.path.join(local.root, "log"),
                          **env_extra))
    cmd = [sys.executable, "-m", "mxhorovodrun", "-np", "4", "--min-np", "2",
           "--host-discovery-script", local.discovery, "--ssh-command", local.standin,
           "--network-interfaces", netns.bridge, "-x", "UCX_TLS=tcp,self",
           "-x", "UCX_NET_DEVICES=eth0"] + list(flags) + \
          [sys.executable, worker_path("elastic_train.py")]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=REPO)
    try:
        out, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out\n" + out[-6000:])
    assert proc.returncode == 0, out[-6000:]
    # Rank 0 reached the driver's host service from its network namespace at each commit.
    assert "hvd.elastic: the driver at" not in out, out[-4000:]
    return out


def test_2x2_one_host_killed_goes_on_with_two_ranks(netns):
    local = LocalHosts(inner_standin=netns.standin)
    try:
        local.set_hosts("h1:2\nh2:2\n")
        out = _run_driver(netns, local, dict(ELASTIC_KILL="0:1:7", ELASTIC_KILL_HOST="1"))
        assert "host h2 left out: rank " in out and "killed by SIGKILL" in out, out[-4000:]
        jobs = check_training(local, out, [4, 2])
        assert jobs[1]["loaded"] == jobs[0]["commits"][-1]
        # h2 holds its own copy of job 0's last commit; h1's went when training ended.
        assert [os.path.basename(p) for p in local.host_commits("h2")] == \
            ["commit-0-%d" % jobs[0]["commits"][-1]]
        assert local.host_commits("h1") == []
    finally:
        local.close()


def test_2x2_link_down_host_left_out(netns):
    # h2's eth0 goes down after job 0's 7th step: h1's ranks time out (3 s bound) naming
    # h2; the driver leaves h2 out and job 1 goes on with h1's 2 ranks from the last commit.
    local = LocalHosts(inner_standin=netns.standin)
    try:
        local.set_hosts("h1:2\nh2:2\n")
        out = _run_driver(netns, local, dict(ELASTIC_LINK_DOWN="0:1:7"),
                          ["-x", "MXHOROVOD_TRANSFER_TIMEOUT_SECONDS=3"])
        assert "host h2 left out: rank " in out and "transfer from host h1 timed out" in out, \
            out[-4000:]
        jobs = check_training(local, out, [4, 2])
        assert jobs[1]["loaded"] == jobs[0]["commits"][-1]
    finally:
        subprocess.run(["ip", "-n", netns.netns["h2"], "link", "set", "eth0", "up"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        local.close()
