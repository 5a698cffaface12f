"""The elastic driver's hosts inside a Slurm allocation (mxhorovodrun/slurm_discovery.py),
against scontrol's answers as Slurm 22.05 prints them; and the flags that pick it."""
import subprocess

import pytest

from mxhorovodrun.args import parse_args
from mxhorovodrun.discovery import DiscoveryError
from mxhorovodrun.slurm_discovery import QUERY_PERIOD_S, SlurmDiscovery, tasks_per_node

ENV = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_TASKS_PER_NODE": "2(x2),1"}


class FakeScontrol:
    """scontrol's show hostnames / show job / show node; ``states`` per node."""

    def __init__(self):
        self.job_nodes = "n[1-3]"
        self.states = {"n1": "IDLE", "n2": "ALLOCATED", "n3": "MIXED"}
        self.calls = []
        self.fail = None
        self.dead, self.hung = set(), set()

    def __call__(self, argv, **kwargs):
        self.calls.append(argv[1:])
        if self.fail:
            raise self.fail
        if argv[0] == "srun":  # the probe: -w HOST
            host = argv[argv.index("-w") + 1]
            if host in self.hung:
                raise subprocess.TimeoutExpired(argv, 30)
            code = 1 if host in self.dead else 0
            return subprocess.CompletedProcess(argv, code, b"srun: error: Unable to "
                                               b"create step" if code else b"", b"")
        words = argv[1:]
        if words[:2] == ["show", "hostnames"]:
            lists = {"n[1-3]": "n1\nn2\nn3\n", "n[1,3]": "n1\nn3\n"}
            out = lists[words[2]]
        elif words[:2] == ["show", "job"]:
            out = "JobId=42 JobName=train UserId=u(1) NodeList=%s BatchHost=n1\n" % self.job_nodes
        elif words[:2] == ["show", "node"]:
            out = "".join("NodeName=%s Arch=x86_64 CPUTot=2 State=%s ThreadsPerCore=1\n"
                          % (n, self.states[n]) for n in words[3].split(","))
        else:
            raise AssertionError(words)
        return subprocess.CompletedProcess(argv, 0, out.encode(), b"")


def test_tasks_per_node_expands_slurms_counts():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    for bad in ("", "2(x0)", "x", "2(3)"):
        with pytest.raises(ValueError, match="not a Slurm count list"):
            tasks_per_node(bad)


def test_nodes_and_slots_of_the_allocation_and_bad_states_left_out():
    fake, now = FakeScontrol(), [0.0]
    d = SlurmDiscovery(ENV, run=fake, clock=lambda: now[0])
    assert d.find() == [("n1", 2), ("n2", 2), ("n3", 1)]
    fake.states.update(n2="DOWN*", n3="MIXED+DRAIN")
    assert d.find() == [("n1", 2), ("n2", 2), ("n3", 1)]  # asked again only after the period
    now[0] += QUERY_PERIOD_S
    assert d.find() == [("n1", 2)]
    fake.states.update(n2="IDLE+NOT_RESPONDING", n3="IDLE")
    now[0] += QUERY_PERIOD_S
    assert d.find() == [("n1", 2), ("n3", 1)]
    fake.job_nodes = "n[1,3]"  # --no-kill: Slurm took n2 out of the job
    fake.states["n2"] = "IDLE"
    now[0] += QUERY_PERIOD_S
    assert d.find() == [("n1", 2), ("n3", 1)]
    assert SlurmDiscovery(ENV, slots_per_host=3, run=FakeScontrol()).find() == \
        [("n1", 3), ("n2", 3), ("n3", 3)]


def test_scontrol_failures_name_the_command():
    fake = FakeScontrol()
    d = SlurmDiscovery(ENV, run=fake)
    fake.fail = subprocess.TimeoutExpired(["scontrol"], 20)
    with pytest.raises(DiscoveryError, match="scontrol show job --oneliner 42 did not answer"):
        d.find()
    fake.fail = FileNotFoundError(2, "No such file or directory")
    with pytest.raises(DiscoveryError, match="cannot run scontrol"):
        SlurmDiscovery(ENV, run=fake)


def test_elastic_flags_take_the_allocation_without_a_script():
    args = parse_args(["--min-np", "2", "--max-np", "4", "python", "t.py"], environ=ENV)
    assert args.elastic and args.num_proc == 2 and args.host_discovery_script is None
    with pytest.raises(SystemExit):  # outside an allocation: the script is needed
        parse_args(["--min-np", "2", "python", "t.py"], environ={})
    args = parse_args(["-np", "4", "python", "t.py"], environ=ENV)
    assert not args.elastic  # no elastic flag: a fixed-size job
    with pytest.raises(SystemExit):  # -H names the hosts: no allocation's discovery
        parse_args(["--min-np", "2", "-H", "a:2", "python", "t.py"], environ=ENV)


def test_the_probe_runs_a_job_step_on_each_host_not_ssh():
    fake = FakeScontrol()
    d = SlurmDiscovery(ENV, run=fake)
    assert d.probe([("n1", 2), ("n2", 2)]) == []
    fake.dead, fake.hung = {"n2"}, {"n3"}
    problems = d.probe([("n1", 2), ("n2", 2), ("n3", 1)])
    assert len(problems) == 2 and problems[0].startswith("host n2 did not run a job step: "
                                                         "srun --jobid 42 --overlap"), problems
    assert "Unable to create step" in problems[0], problems
    assert problems[1].startswith("host n3 did not run a job step within 30 s"), problems


def test_min_np_beyond_the_allocation_is_refused_at_once(capsys):
    with pytest.raises(SystemExit):
        parse_args(["--min-np", "6", "python", "t.py"], environ=ENV)  # 5 tasks
    assert "--min-np 6 is more than the 5 slots of Slurm job 42" in capsys.readouterr().err
    args = parse_args(["--min-np", "6", "--slots-per-host", "2", "python", "t.py"], environ=ENV)
    assert args.elastic and args.min_np == 6  # 3 nodes x 2 slots
