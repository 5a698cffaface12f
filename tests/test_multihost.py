"""Several hosts through MPI (issue 7), on hosts made of network namespaces on this machine
(tests/netns_hosts.py): ranks launched through an ssh stand-in, each host with its own
network stack, address and host name. Unless a test says otherwise the network path is
forced (MPIR_CVAR_NOLOCAL=1, UCX_TLS=tcp,self, UCX_NET_DEVICES=eth0), so every byte between
hosts crosses the veths; the interface counters prove it. Skipped with the reason where
namespaces are not allowed.
"""
import pytest

from netns_hosts import NetnsHosts, NetnsUnavailable

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
    proc = hosts.run(["h1", "h2"], "core_collectives.py", ppn=2, timeout=240, launch_from="h1")
    # Each host needs the other host's share of the big tensor at least once.
    for h in ("h1", "h2"):
        assert received(proc, h) >= BIG_BYTES, (h, received(proc, h), BIG_BYTES)
    assert received(proc, "h3") < 1 << 20, "h3 was not in the job"


# -- training ----------------------------------------------------------------------------

def test_training_2x2_equals_one_process(hosts):
    # Every rank's parameters equal one process trained on the concatenated batch.
    hosts.run(["h1", "h2"], "train_equivalence.py", TRAIN_SCENARIOS, ppn=2, timeout=300)


# -- failures ----------------------------------------------------------------------------

def test_killed_rank_ends_the_job_on_every_host(hosts):
    # Rank 3 (on h2) dies by SIGKILL; the others keep calling allreduce for up to 60 s.
    proc = hosts.run(["h1", "h2"], "multihost_kill.py", [3], ppn=2, timeout=150, expect_ok=False)
    out = proc.stdout
    assert "RANK 3 KILLS ITSELF" in out, out[-3000:]
    assert proc.returncode != 0, out[-3000:]
    assert "SURVIVED" not in out, out[-3000:]
    assert not proc.leftover_pids, "processes left after the launcher exited: %s" % proc.leftover_pids
