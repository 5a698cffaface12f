"""Elastic jobs across network-namespace hosts when a whole host's job processes go at once
while the host stays up (a cgroup OOM kill, a node health check, a preemption), and when a
host gets SIGTERM first and SIGKILL after a grace time (a spot notice, a drain; Slurm's
KillWait). Each test: 2 hosts x 2 ranks under mxhorovodrun's elastic driver, checked against
a one-process replay as in test_elastic_driver.py (every rank's steps, the final
parameters)."""
import os
import signal
import subprocess
import sys
import time

from mxhorovod_devtools.elastic_hosts import LocalHosts
from mxhorovod_devtools.mpirun import REPO, worker_env, worker_path
from test_elastic_driver import check_training, history, read_log

TIMEOUT_S = 150


def start(netns, local, **env_extra):
    env = worker_env(dict(local.env(), ELASTIC_LOG=os.path.join(local.root, "log"),
                          ELASTIC_TIMES="1", **env_extra))
    cmd = [sys.executable, "-m", "mxhorovodrun", "-np", "4", "--min-np", "2",
           "--host-discovery-script", local.discovery, "--ssh-command", local.standin,
           "--network-interfaces", netns.bridge, "-x", "UCX_TLS=tcp,self",
           "-x", "UCX_NET_DEVICES=eth0", sys.executable, worker_path("elastic_train.py")]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, cwd=REPO)


def finish(proc, deadline):
    try:
        out, _ = proc.communicate(timeout=max(1, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError("timed out\n" + out[-6000:])
    return proc.returncode, out


def wait_for(local, what, deadline, proc):
    """Returns once the log has ``what`` = (count, prefix): that many lines starting with
    prefix (e.g. 'STEP 0'); fails at ``deadline`` (monotonic s) or when ``proc`` ended."""
    count, prefix = what
    log = os.path.join(local.root, "log")
    while time.monotonic() < deadline and proc.poll() is None:
        if os.path.exists(log):
            with open(log) as f:
                if sum(line.startswith(prefix) for line in f) >= count:
                    return
        time.sleep(0.05)
    raise AssertionError("no %d lines %r in the log (the driver %s)" % (
        count, prefix, "ended" if proc.poll() is not None else "runs"))


def signal_host(netns, host, sig):
    """Sends ``sig`` to every process of ``host`` (its network namespace): hydra's proxy,
    the rank guards and their keepers, the ranks. Returns how many there were."""
    pids = netns.pids()[host]
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    return len(pids)


def stamps(local, what, gen):
    return [float(w[3]) for w in read_log(local) if w[:3] == ["TIME", what, str(gen)]]


def test_every_process_of_a_host_killed_while_it_stays_up(netns):
    local = LocalHosts(inner_standin=netns.standin)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        local.set_hosts("h1:2\nh2:2\n")
        proc = start(netns, local, ELASTIC_STEP_SLEEP="0.2")
        wait_for(local, (5, "STEP 0"), deadline, proc)
        assert signal_host(netns, "h2", signal.SIGKILL) >= 5  # proxy, 2 guards, 2 ranks
        code, out = finish(proc, deadline)
        assert code == 0, out[-6000:]
        assert "host h2 left out: its job processes were killed at once" in out, out[-4000:]
        jobs = check_training(local, out, [4, 2])
        assert jobs[1]["loaded"] == jobs[0]["commits"][-1]
    finally:
        local.close()


def test_sigterm_then_sigkill_after_a_grace_time_loses_no_step(netns):
    # Commits only at each epoch's end, and check_host_updates() after every step: the
    # notice is acted on at the next step, not the next commit.
    grace = 20.0
    local = LocalHosts(inner_standin=netns.standin)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        local.set_hosts("h1:2\nh2:2\n")
        proc = start(netns, local, ELASTIC_STEP_SLEEP="0.3", ELASTIC_CHECK="1",
                     ELASTIC_COMMIT_EVERY="100")
        wait_for(local, (5, "STEP 0"), deadline, proc)
        notice = time.time()
        assert signal_host(netns, "h2", signal.SIGTERM) >= 5
        wait_for(local, (1, "START 1"), min(deadline, time.monotonic() + grace), proc)
        left = signal_host(netns, "h2", signal.SIGKILL)  # the grace time is over
        code, out = finish(proc, deadline)
        assert code == 0, out[-6000:]
        assert left == 0, "h2 still ran %d processes when the grace time ended" % left
        assert "host h2 is leaving (SIGTERM to rank " in out, out[-4000:]
        assert "the hosts changed; job 0 ended at a commit" in out, out[-4000:]
        assert "left out: its job processes" not in out and "killed by" not in out, out[-4000:]
        jobs = check_training(local, out, [4, 2])
        # Job 0 ended at its commit: every step it did is kept, none is done again.
        assert jobs[0]["events"][-1][0] == "commit", jobs[0]["events"]
        assert jobs[1]["loaded"] == jobs[0]["commits"][-1]
        _, kept = history(read_log(local))
        assert len(kept) == sum(1 for j in jobs for e in j["events"] if e[0] == "step")
        # At most the step in flight and the next one after the notice.
        assert len([t for t in stamps(local, "step", 0) if t > notice]) <= 2
        started = stamps(local, "start", 1)[0]
        print("SIGTERM -> job 1's training function %.1f s, -> its first step %.1f s"
              % (started - notice, stamps(local, "step", 1)[0] - notice))
        assert started - notice < grace
    finally:
        local.close()


def test_a_script_error_on_every_rank_is_not_retried(netns):
    local = LocalHosts(inner_standin=netns.standin)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        local.set_hosts("h1:2\nh2:2\n")
        proc = start(netns, local, ELASTIC_FAIL="0:3", ELASTIC_FAIL_ALL="1")
        code, out = finish(proc, deadline)
        assert code != 0, out[-4000:]
        assert "an error of the script is not retried" in out, out[-4000:]
        assert out.count("elastic: job ") == 1 and "left out" not in out, out[-4000:]
    finally:
        local.close()


def test_a_sigterm_to_the_launcher_still_ends_the_run(netns):
    # Hydra hands the launcher's SIGTERM on to every rank guard: the driver answers them
    # that the run is being stopped (no host's notice), and the ranks die of it at once.
    local = LocalHosts(inner_standin=netns.standin)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        local.set_hosts("h1:2\nh2:2\n")
        proc = start(netns, local, ELASTIC_STEP_SLEEP="0.3", ELASTIC_COMMIT_EVERY="100")
        wait_for(local, (3, "STEP 0"), deadline, proc)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, out = finish(proc, min(deadline, sent + 30))
        assert code != 0, out[-4000:]
        assert time.monotonic() - sent < 10, out[-4000:]
        assert "the job was interrupted (signal 15); no reset" in out, out[-4000:]
        assert out.count("elastic: job ") == 1 and "is leaving" not in out, out[-4000:]
    finally:
        local.close()


def test_every_host_leaving_ends_the_run_at_its_commit(netns):
    # SIGTERM to every host (the job as a whole preempted, a batch job's time up): the
    # ranks commit and stop at the next step; the run ends (128 + SIGTERM) without
    # waiting --elastic-timeout for hosts that will not come.
    local = LocalHosts(inner_standin=netns.standin)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        local.set_hosts("h1:2\nh2:2\n")
        proc = start(netns, local, ELASTIC_STEP_SLEEP="0.3", ELASTIC_CHECK="1",
                     ELASTIC_COMMIT_EVERY="100")
        wait_for(local, (5, "STEP 0"), deadline, proc)
        sent = time.monotonic()
        for host in ("h1", "h2"):
            signal_host(netns, host, signal.SIGTERM)
        code, out = finish(proc, min(deadline, sent + 60))
        assert code == 128 + signal.SIGTERM, out[-4000:]
        assert "every host of the job is leaving (SIGTERM); the run ends at its last " \
            "commit" in out, out[-4000:]
        assert time.monotonic() - sent < 20, out[-4000:]
        jobs, _ = history(read_log(local))
        assert len(jobs) == 1 and jobs[0]["events"][-1][0] == "commit", jobs
        # Each host keeps that commit (for a resumed run: docs/elastic.md).
        last = "commit-0-%d" % jobs[0]["commits"][-1]
        for host in ("h1", "h2"):
            assert [os.path.basename(p) for p in local.host_commits(host)] == [last]
    finally:
        local.close()
