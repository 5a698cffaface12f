"""Several hosts through MPI (issue 7), on hosts made of network namespaces on this machine
(tests/netns_hosts.py): ranks launched through an ssh stand-in, each host with its own
network stack, address and host name. Unless a test says otherwise the network path is
forced (MPIR_CVAR_NOLOCAL=1, UCX_TLS=tcp,self, UCX_NET_DEVICES=eth0), so every byte between
hosts crosses the veths; the interface counters prove it.

The launcher tests start the same jobs as a user on a cluster would, with ``mxhorovodrun
-np 4 -H h1:2,h2:2 --ssh-command STANDIN --network-interfaces NIC python worker.py`` (or
``--hostfile``), from h1 (``eth0``) or from this machine (the bridge).

Also here: hierarchical allreduce (HOROVOD_HIERARCHICAL_ALLREDUCE=1) on one host and on
"fake hosts" (one machine, host names set per rank by ``unshare --uts``), which need no
namespaces. Skipped with the reason where namespaces (or UTS namespaces) are not allowed.
"""
import json
import math
import os
import re
import sys

import pytest

from mxhorovod_devtools.mpirun import REPO, TESTS, run_ranks, worker_path
from mxhorovod_devtools.netns_hosts import NetnsHosts, NetnsUnavailable, fake_hosts_prefix, fake_hosts_unavailable

HIER = {"HOROVOD_HIERARCHICAL_ALLREDUCE": "1"}
FLAT = {"HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}
# Many pipeline slices between hosts, the last one shorter (core_collectives' sizes).
SMALL_LINK_SLICES = {"MXHOROVOD_LINK_SLICE_BYTES": str(1 << 16)}
BIG_BYTES = 3 * 1024 * 1024 * 4  # core_collectives.py's "big" float32 tensor
# Fewer training scenarios than test_training_multi.py: both wrappers, groups, Module fit.
TRAIN_SCENARIOS = ["trainer_sgd", "trainer_groups_predivide", "opt_in_gluon_trainer_adam",
                   "module_fit_sgd"]


@pytest.fixture(scope="module")
def hosts():
    """Three namespace hosts h1, h2, h3 for the whole module, torn down at its end."""
    try:
        with NetnsHosts(3) as made:
            yield made
    except NetnsUnavailable as e:
        pytest.skip("no network namespaces: %s" % e)




def received(proc, host):
    """Bytes that ``host`` received during ``proc`` (from the interface counters)."""
    return proc.counters_after[host][0] - proc.counters_before[host][0]


# -- topology ----------------------------------------------------------------------------

def test_topology_2x2_on_every_rank(hosts):
    hosts.run(["h1", "h2"], "multihost_topology.py", ["h1,h1,h2,h2"], ppn=2, timeout=120)


def test_topology_uneven_hosts_shared_memory_allowed(hosts):
    # One rank on h1, two on h2, one on h3 (local_size 1 and 2; cross_size 3 and 1), with
    # the default transports (shared memory across the namespaces): grouping is by host.
    hosts.run(["h1:1", "h2:2", "h3:1"], "multihost_topology.py", ["h1,h2,h2,h3"], np=4,
              timeout=120, force_network=False)


# -- collectives -------------------------------------------------------------------------

def test_collectives_2x2_cross_the_network(hosts):
    # The same worker and numpy expectations as 4 ranks on one host (test_core_multi.py).
    # mpirun runs on h1 (-iface eth0), as a user on a cluster's first node would start it.
    proc = hosts.run(["h1", "h2"], "collectives_every_op.py", ppn=2, timeout=240, launch_from="h1")
    # Each host needs the other host's share of the big tensor at least once.
    for h in ("h1", "h2"):
        assert received(proc, h) >= BIG_BYTES, (h, received(proc, h), BIG_BYTES)
    assert received(proc, "h3") < 1 << 20, "h3 was not in the job"


def test_hierarchical_collectives_2x2(hosts):
    # The pipeline (reduce within the host, across, broadcast) in 64 KiB slices.
    proc = hosts.run(["h1", "h2"], "collectives_every_op.py", ppn=2, timeout=240,
                     env=dict(HIER, HOROVOD_FUSION_THRESHOLD=str(1 << 20),
                              MXHOROVOD_SLICE_BYTES=str(1 << 18), **SMALL_LINK_SLICES))
    for h in ("h1", "h2"):
        assert received(proc, h) >= BIG_BYTES, (h, received(proc, h))


def test_flat_collectives_2x2_two_slices_in_flight(hosts):
    # Flat between hosts (explicitly): two 64 KiB slices of an allreduce in flight at once.
    proc = hosts.run(["h1", "h2"], "collectives_every_op.py", ppn=2, timeout=240,
                     env=dict(FLAT, **SMALL_LINK_SLICES))
    for h in ("h1", "h2"):
        assert received(proc, h) >= BIG_BYTES, (h, received(proc, h))


def test_default_collectives_uneven_hosts(hosts):
    # 1, 2 and 1 ranks on three hosts, no setting: hierarchical (a host with 2 ranks), with
    # local groups of 1 and 2, in 64 KiB pipeline slices.
    proc = hosts.run(["h1:1", "h2:2", "h3:1"], "collectives_every_op.py", np=4, timeout=240,
                     env=SMALL_LINK_SLICES)
    for h in ("h1", "h2", "h3"):
        assert received(proc, h) >= BIG_BYTES, (h, received(proc, h))


def test_default_collectives_3x1_ring(hosts):
    # One rank on each of 3 hosts, no setting: the ring between hosts (hierarchical with
    # local groups of 1) in 64 KiB slices, blocks of uneven sizes; each host sends at least
    # 2(3-1)/3 of the big tensor.
    proc = hosts.run(["h1", "h2", "h3"], "collectives_every_op.py", ppn=1, timeout=240,
                     env=SMALL_LINK_SLICES)
    for h in ("h1", "h2", "h3"):
        sent = proc.counters_after[h][1] - proc.counters_before[h][1]
        assert sent >= 4 / 3 * BIG_BYTES, (h, sent)


def test_hierarchical_sends_less_between_hosts(hosts):
    # With MPICH's ring forced for every allreduce, a flat 4-rank ring crosses between the
    # hosts twice with 2(p-1)/p = 1.5x the payload each way; hierarchical sends only
    # between the two local roots: 2(2-1)/2 = 1x. Proves the hierarchical path ran.
    mib = 8
    # (The data plane calls MPI_Iallreduce, or MPI_Allreduce with MXHOROVOD_BLOCKING_DATA=1.)
    ring = {"MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM": "tsp_ring",
            "MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM": "ring"}
    # The workers also check that every rank measured the link's rate (link_pace.h).
    flat = hosts.run(["h1", "h2"], "multihost_traffic.py", [mib, "pace"], ppn=2, timeout=120,
                     env=dict(ring, **FLAT))
    hier = hosts.run(["h1", "h2"], "multihost_traffic.py", [mib, "pace"], ppn=2, timeout=120,
                     env=dict(ring, **HIER))
    # Without a setting, 2 hosts x 2 ranks: hierarchical.
    auto = hosts.run(["h1", "h2"], "multihost_traffic.py", [mib], ppn=2, timeout=120, env=ring)
    payload = mib << 20
    for h in ("h1", "h2"):
        assert received(flat, h) >= 1.5 * payload, (h, received(flat, h))
        assert payload <= received(hier, h) < 1.2 * payload, (h, received(hier, h))
        assert payload <= received(auto, h) < 1.2 * payload, (h, received(auto, h))


# -- launched with mxhorovodrun ------------------------------------------------------------

def mxhorovodrun(form="installed"):
    """mxhorovodrun's command words: with ``form="installed"`` the console script next to
    this Python when there is one (a venv after ``pip install -e .``), else ``python -m
    mxhorovodrun``; ``form="module"`` always the latter."""
    script = os.path.join(os.path.dirname(sys.executable), "mxhorovodrun")
    if form == "installed" and os.path.isfile(script) and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "mxhorovodrun"]


def launching_env(**extra):
    """The environment a user launches with: this one, one OpenMP thread per rank, this
    checkout first on PYTHONPATH (then tests/, for the workers' support package), and
    ``extra``. The launcher alone must carry it to the ranks: the ssh stand-in starts them
    with a bare login environment."""
    env = dict(os.environ)
    for name in list(env):
        if name.startswith(("UCX_", "MPIR_CVAR_", "HOROVOD_")):
            del env[name]  # only what a test passes decides the transports and settings
    env.update(OMP_NUM_THREADS="1", MXNET_CPU_WORKER_NTHREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(
        [REPO, TESTS] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.update(extra)
    return env


def worker(name):
    return [sys.executable, worker_path(name)]


def check_traffic(proc, mib):
    # Each host needs the other host's share of the big allreduce at least once; h3 was idle.
    for h in ("h1", "h2"):
        assert received(proc, h) >= mib << 20, (h, received(proc, h), mib << 20)
    assert received(proc, "h3") < 1 << 20, "h3 was not in the job"
    assert not proc.leftover_pids, "processes left after the launcher exited: %s" % proc.leftover_pids


def test_mxhorovodrun_2x2_from_h1(hosts):
    # From the first node, as on a cluster: -H, --network-interfaces eth0, and UCX's TCP
    # between hosts chosen in the launching environment.
    mib = 4
    cmd = mxhorovodrun() + ["--verbose", "-np", "4", "-H", "h1:2,h2:2", "--ssh-command", hosts.standin,
                            "--network-interfaces", "eth0"] + \
        worker("multihost_topology.py") + ["h1,h1,h2,h2", str(mib)]
    proc = hosts.run_cmd(hosts.on_host_cmd("h1", cmd), timeout=120, expect_ranks=4,
                         env=launching_env(**hosts.network_env(within_host_tcp=False)))
    assert " -genvall " in proc.stdout and " -iface eth0 " in proc.stdout, proc.stdout[-3000:]
    check_traffic(proc, mib)


def test_mxhorovodrun_hostfile_from_this_machine(hosts, tmp_path):
    # From outside the hosts (the bridge's address), hosts from a file in horovodrun's
    # format, UCX's TCP between hosts passed with -x; the module form of the launcher.
    # The names h1, h2 resolve only inside the namespaces: the launcher passes them on.
    mib = 4
    hostfile = tmp_path / "hosts.txt"
    hostfile.write_text("# the test's hosts\nh1 slots=2\nh2 slots=2\n")
    xs = ["-x", "UCX_TLS=tcp,self", "-x", "UCX_NET_DEVICES=eth0"]
    cmd = mxhorovodrun("module") + ["-np", "4", "--hostfile", str(hostfile), "--ssh-command",
                                    hosts.standin, "--network-interfaces", hosts.bridge] + xs + \
        worker("multihost_topology.py") + ["h1,h1,h2,h2", str(mib)]
    proc = hosts.run_cmd(cmd, timeout=120, expect_ranks=4, env=launching_env())
    check_traffic(proc, mib)


def test_mxhorovodrun_flags_reach_both_hosts(hosts):
    # HOROVOD_* from a flag and a -x variable on every rank of both hosts, with the host
    # names and topology checked there; the ssh stand-in from MXHOROVOD_SSH_COMMAND.
    # Every rank under the rank guard, from the same paths on both hosts.
    want = {"size": 4, "init_error": None, "hosts": ["h1", "h1", "h2", "h2"], "guard": True,
            "env": {"HOROVOD_FUSION_THRESHOLD": str(4 << 20), "HOROVOD_CACHE_CAPACITY": "16",
                    "FOO": "bar baz", "UCX_TLS": "tcp,self"}}
    cmd = mxhorovodrun() + ["-np", "4", "-H", "h1:2,h2:2", "--network-interfaces", "eth0",
                            "--fusion-threshold-mb", "4", "--cache-capacity", "16",
                            "-x", "FOO=bar baz"] + worker("settings_env.py") + [json.dumps(want)]
    env = launching_env(MXHOROVOD_SSH_COMMAND=hosts.standin, **hosts.network_env(within_host_tcp=False))
    hosts.run_cmd(hosts.on_host_cmd("h1", cmd), timeout=120, expect_ranks=4, env=env)


def test_mxhorovodrun_killed_rank_exits_non_zero(hosts):
    # Rank 3 (on h2) dies by SIGKILL; the launcher must end every rank and exit non-zero.
    # Its rank guard, on h2, names it.
    cmd = mxhorovodrun() + ["-np", "4", "-H", "h1:2,h2:2", "--ssh-command", hosts.standin,
                            "--network-interfaces", "eth0"] + worker("multihost_kill.py") + ["3"]
    proc = hosts.run_cmd(hosts.on_host_cmd("h1", cmd), timeout=150,
                         env=launching_env(**hosts.network_env(within_host_tcp=False)))
    out = proc.stdout
    assert "RANK 3 KILLS ITSELF" in out, out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    assert "SURVIVED" not in out, out[-3000:]
    assert re.search(r"^\[3\] \[3\]<error> .* mxhorovod: rank 3 \(pid \d+ on h2\) was killed by "
                     r"SIGKILL \(signal 9\)", out, re.M), out[-3000:]
    assert not proc.leftover_pids, "processes left after the launcher exited: %s" % proc.leftover_pids


# -- training ----------------------------------------------------------------------------

@pytest.mark.parametrize("env", [{}, HIER], ids=["flat", "hierarchical"])
def test_training_2x2_equals_one_process(hosts, env):
    # Every rank's parameters equal one process trained on the concatenated batch.
    hosts.run(["h1", "h2"], "training_equivalence.py", TRAIN_SCENARIOS, ppn=2, timeout=300, env=env)


# -- failures ----------------------------------------------------------------------------

def test_killed_rank_ends_the_job_on_every_host(hosts):
    # Rank 3 (on h2) dies by SIGKILL; the others keep calling allreduce for up to 60 s.
    proc = hosts.run(["h1", "h2"], "multihost_kill.py", [3], ppn=2, timeout=150, expect_ok=False)
    out = proc.stdout
    assert "RANK 3 KILLS ITSELF" in out, out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    assert "SURVIVED" not in out, out[-3000:]
    assert not proc.leftover_pids, "processes left after the launcher exited: %s" % proc.leftover_pids


LINK_DOWN = re.compile(
    r"transfer between hosts timed out: (negotiation|allreduce 'link\.big') has waited ([\d.]+) s "
    r"in (MPI_I[^\n]*?) for host (h[12]) \((\d+) bytes over the link of host (h[12])\), past its "
    r"bound of ([\d.]+) s \(MXHOROVOD_TRANSFER_TIMEOUT_SECONDS=3\.0 plus the bytes at "
    r"MXHOROVOD_TRANSFER_MIN_MBITS=80\.0\): the network between h[12] and h[12] is down or "
    r"slower than that, or a rank there stopped; MPI cannot cancel a transfer, so rank \d+ "
    r"ends the job \(MPI_Abort\)")


@pytest.mark.parametrize("env,ppn,how", [({}, 2, "down"), ({}, 2, "slow"),
                                         (dict(FLAT, MXHOROVOD_LINK_SLEEP_US="0"), 1, "slow")],
                         ids=["2x2-default-down", "2x2-default-slow", "2x1-flat-yield-slow"])
def test_transfer_bound_ends_the_job(hosts, env, ppn, how):
    # h2's eth0 goes down, or to 1 Mbit/s, after a first allreduce; the next 16 MiB one
    # cannot finish in time (the flat case with waits that yield instead of sleeping). The bound (3 s + bytes at 80 Mbit/s) ends the job with the
    # error naming the other host; with the link slow, in the allreduce's data calls (the
    # negotiation's small messages still pass).
    settings = dict(env, MXHOROVOD_TRANSFER_TIMEOUT_SECONDS="3", MXHOROVOD_TRANSFER_MIN_MBITS="80")
    try:
        proc = hosts.run(["h1", "h2"], "multihost_link_down.py", ["h2", how], ppn=ppn,
                         timeout=120, env=settings, expect_ok=False)
    finally:
        hosts.reset_link("h2")
    out = proc.stdout
    # (With eth0 down, h2's output cannot reach mpirun: its "LINK DOWN AT" line is lost.)
    assert how == "down" or "LINK DOWN AT" in out, out[-3000:]
    assert proc.returncode != 0 and "SURVIVED" not in out, out[-3000:]
    errors = LINK_DOWN.findall(out)
    assert errors, out[-3000:]
    for what, waited, call, peer, nbytes, here, bound in errors:
        assert here != peer, (here, peer)
        assert float(bound) == pytest.approx(3 + int(nbytes) * 8 / 80e6, abs=0.06), (nbytes, bound)
        assert float(waited) >= float(bound), (waited, bound)
        if how == "slow":
            assert what == "allreduce 'link.big'", errors


# -- hierarchical allreduce without namespaces -------------------------------------------

def test_hierarchical_one_host():
    # local_size 4, cross_size 1: the reduce and broadcast within the host do everything.
    run_ranks(4, "collectives_every_op.py", timeout=240, env=HIER)


def test_hierarchical_fake_hosts_uneven():
    # Host names a, b, b, c on one machine (shared memory): local groups of 1 and 2 ranks,
    # three local roots; 64 KiB slices.
    why = fake_hosts_unavailable()
    if why:
        pytest.skip(why)
    names = ["a", "b", "b", "c"]
    run_ranks(len(names), "collectives_every_op.py", timeout=240, prefix=fake_hosts_prefix(names),
              env=dict(HIER, MXHOROVOD_SLICE_BYTES=str(1 << 16)))


def test_hierarchical_groups_reduced_where_they_lie(tmp_path):
    # Between hosts a, b, b, c (no setting: hierarchical; the ring between 3 hosts, local
    # groups of 1 and 2), grouped allreduces of uneven tensors in 4 KiB link slices: every
    # dtype's values on every rank, and no group packed into the fusion buffer (the timeline
    # has no MEMCPY_IN_FUSION_BUFFER for them). Between 2 hosts the same path runs in
    # test_hierarchical_collectives_2x2 (core_collectives' groups).
    why = fake_hosts_unavailable()
    if why:
        pytest.skip(why)
    names = ["a", "b", "b", "c"]
    run_ranks(len(names), "multihost_hier_groups.py", [str(tmp_path / "timeline.json")], timeout=180,
              prefix=fake_hosts_prefix(names), env={"MXHOROVOD_LINK_SLICE_BYTES": "4096"})


def test_more_ranks_than_cores_on_one_fake_host_only():
    # More ranks than cores on host "a" (no busy test in its data waits), one rank on host
    # "b": the ranks' data calls match (until 2026-12-03 "b" blocked by default and "a" did
    # not: agreed on nonblocking, a hang before that agreement).
    why = fake_hosts_unavailable()
    if why:
        pytest.skip(why)
    names = ["a"] * max(3, (os.cpu_count() or 1) + 1) + ["b"]
    run_ranks(len(names), "collectives_every_op.py", timeout=300, prefix=fake_hosts_prefix(names),
              env={"MXHOROVOD_BLOCKING_DATA": ""})


def test_hierarchical_setting_must_agree():
    # On for two ranks only: init fails on every rank with the ranks named, no hang.
    proc = run_ranks(3, "multihost_hier_mismatch.py", timeout=120)
    assert proc.stdout.count("on for ranks 0, 1; off for ranks 2.") == 3, proc.stdout[-3000:]


def test_transfer_settings_in_one_process(monkeypatch):
    # A rate of 0 is refused, naming the way to turn the bound off, and so are a word, a
    # negative pause and one above the cap; the bound off (0) and the settings read as
    # numbers work with a single rank (nothing crosses a host).
    import mxnet as mx
    import mxhorovod as hvd
    if hvd.is_initialized():
        hvd.shutdown()
    for name, value, error in (
            ("MXHOROVOD_TRANSFER_MIN_MBITS", "0",
             "MXHOROVOD_TRANSFER_MIN_MBITS=0.*MXHOROVOD_TRANSFER_TIMEOUT_SECONDS=0"),
            ("MXHOROVOD_TRANSFER_MIN_MBITS", "fast", "MXHOROVOD_TRANSFER_MIN_MBITS='fast'"),
            ("MXHOROVOD_LINK_SLEEP_US", "-5", "MXHOROVOD_LINK_SLEEP_US='-5'"),
            ("MXHOROVOD_LINK_SLEEP_US", "1e9", "MXHOROVOD_LINK_SLEEP_US='1e9' is above the "
                                               "largest pause taken, 100000 microseconds")):
        monkeypatch.setenv(name, value)
        with pytest.raises(ValueError, match=error):
            hvd.init()
        monkeypatch.delenv(name)
    from mxhorovod import _core
    monkeypatch.setenv("MXHOROVOD_TRANSFER_MIN_MBITS", "10")
    monkeypatch.setenv("MXHOROVOD_TRANSFER_TIMEOUT_SECONDS", "0")
    # A number fixes the pause between tests of a wait between hosts; "auto" (as unset)
    # sizes it from the link's rate, 50 us until one is measured.
    for value, pause in (("20", 20), (" AUTO", None), ("auto", 50)):
        monkeypatch.setenv("MXHOROVOD_LINK_SLEEP_US", value)
        if pause is None:
            with pytest.raises(ValueError, match="MXHOROVOD_LINK_SLEEP_US=' AUTO'"):
                hvd.init()
            continue
        hvd.init()
        try:
            y = hvd.allreduce(mx.nd.array([1.5, -2.0]), op=hvd.Sum, name="transfer.single")
            assert y.asnumpy().tolist() == [1.5, -2.0]
            # (Read after a collective: the background thread sets the pace as it starts.)
            assert _core.link_pace() == (0, pause)
        finally:
            hvd.shutdown()


def test_link_pace_follows_the_measured_rate():
    # ops/link_pace.h: the pause of a wait between hosts is the time the link takes to move
    # 20 KB at the rate measured by allreduces between hosts; a rise is taken at once, a
    # fall by an eighth of the difference per call. Measurements are given here, no job.
    from mxhorovod import _core
    mib64 = 64 << 20
    try:
        _core.reset_link_pace()
        assert _core.link_pace() == (0, 50)  # nothing measured: the first pause
        for small in ((4 << 20) - 1, 0):
            _core.note_link_allreduce(small, 2, 0.001)  # latency-bound: ignored
        _core.note_link_allreduce(mib64, 1, 0.01)  # one host: no link
        _core.note_link_allreduce(mib64, 2, 0)
        assert _core.link_pace() == (0, 50)
        # 64 MiB between 2 hosts in 0.56 s: each host sent 64 MiB, 958.7 Mbit/s; 167 us.
        _core.note_link_allreduce(mib64, 2, 0.56)
        rate, pause = _core.link_pace()
        assert rate == pytest.approx(mib64 / 0.56) and pause == 167
        # 3 hosts: each sends 4/3 of the bytes. Faster: taken at once.
        _core.note_link_allreduce(mib64 * 3 // 4, 3, 0.2)
        assert _core.link_pace() == (pytest.approx(mib64 / 0.2), 60)
        # A slow call (a late peer, or a slower link): a quarter of the way down.
        _core.note_link_allreduce(mib64, 2, 1.0)
        want = 0.75 * mib64 / 0.2 + 0.25 * mib64
        assert _core.link_pace() == (pytest.approx(want), math.ceil(20000 / want * 1e6))
        # 20 Gbit/s and faster: under 10 us, so no pause (the wait yields its core).
        _core.note_link_allreduce(mib64, 2, mib64 * 8 / 20e9)
        assert _core.link_pace()[1] == 0
        _core.reset_link_pace()
        _core.note_link_allreduce(mib64, 2, mib64 * 8 / 100e6)  # 100 Mbit/s: 1.6 ms, capped
        assert _core.link_pace()[1] == 1000
        _core.note_link_allreduce(mib64, 2, float("nan"))  # no time: ignored
        assert _core.link_pace() == (pytest.approx(100e6 / 8), 1000)
        # MXHOROVOD_LINK_SLEEP_US fixes the pause; the rate is still measured.
        _core.reset_link_pace(0)
        _core.note_link_allreduce(mib64, 2, 0.56)
        assert _core.link_pace() == (pytest.approx(mib64 / 0.56), 0)
    finally:
        _core.reset_link_pace()


def test_hierarchical_setting_in_one_process(monkeypatch):
    # A word is refused with the variable named (Horovod would read it as off); "1" with
    # a single rank (local and cross size 1) gives the input back.
    import mxnet as mx
    import mxhorovod as hvd
    if hvd.is_initialized():
        hvd.shutdown()
    monkeypatch.setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "yes")
    with pytest.raises(ValueError, match="HOROVOD_HIERARCHICAL_ALLREDUCE='yes'"):
        hvd.init()
    assert not hvd.is_initialized()
    monkeypatch.setenv("HOROVOD_HIERARCHICAL_ALLREDUCE", "1")
    hvd.init()
    try:
        y = hvd.allreduce(mx.nd.array([1.5, -2.0]), op=hvd.Sum, name="hier.single")
        assert y.asnumpy().tolist() == [1.5, -2.0]
    finally:
        hvd.shutdown()
