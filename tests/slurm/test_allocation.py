"""mxhorovodrun inside a Slurm allocation, without Slurm: the allocation read from Slurm's
variables (mxhorovodrun/slurm.py), -np from its tasks and bounded by them unless
--oversubscribe, OMP_NUM_THREADS per node, and the rank guard's threads per host."""
import os
import subprocess
import sys

import pytest

from mxhorovodrun.args import parse_args
from mxhorovodrun.guard import OMP_MARKER, guard_path
from mxhorovodrun.mpi import HYDRA
from mxhorovodrun.slurm import (allocation, check_num_proc, expand_counts, node_names,
                                omp_threads_in, outside_note, ranks_per_node)
from support.launcher import plan

# sbatch -N3 -n7 on 2-, 2- and 4-CPU nodes: the variables the batch script sees.
JOB = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "n[1-3]", "SLURM_NTASKS": "7",
       "SLURM_TASKS_PER_NODE": "2(x2),3", "SLURM_JOB_CPUS_PER_NODE": "2(x2),4"}


@pytest.mark.parametrize("text,want", [
    ("1", [1]), ("2(x3),1", [2, 2, 2, 1]), ("4,2(x2)", [4, 2, 2]), (" 3(x1) ", [3]),
])
def test_expand_counts(text, want):
    assert expand_counts(text) == want


@pytest.mark.parametrize("text", ["", "x", "2(x0)", "2(3)", "2(x3", "-1", "2,,1", "1.5"])
def test_expand_counts_refuses_bad_text_naming_the_variable(text):
    with pytest.raises(ValueError, match="SLURM_TASKS_PER_NODE="):
        expand_counts(text)


def test_allocation_from_the_variables():
    alloc = allocation(JOB)
    assert (alloc.job_id, alloc.nodelist, alloc.ntasks, alloc.tasks_per_node,
            alloc.cpus_per_node) == ("42", "n[1-3]", 7, [2, 2, 3], [2, 2, 4])
    # Outside an allocation: None (either variable missing).
    assert allocation({}) is None
    assert allocation({"SLURM_JOB_ID": "42"}) is None
    assert allocation({k: v for k, v in JOB.items() if k != "SLURM_JOB_ID"}) is None
    # sbatch -N2 alone sets no SLURM_NTASKS: the tasks per node add up.
    assert allocation({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "a,b",
                       "SLURM_TASKS_PER_NODE": "1(x2)"}).ntasks == 2
    # No CPUs per node (or not one per node): unknown, not guessed.
    assert allocation(dict(JOB, SLURM_JOB_CPUS_PER_NODE="")).cpus_per_node is None
    assert allocation(dict(JOB, SLURM_JOB_CPUS_PER_NODE="2")).cpus_per_node is None


@pytest.mark.parametrize("change,message", [
    ({"SLURM_NTASKS": "many"}, "SLURM_NTASKS='many'"),
    ({"SLURM_NTASKS": "0"}, "SLURM_NTASKS='0'"),
    ({"SLURM_TASKS_PER_NODE": "2(x"}, "SLURM_TASKS_PER_NODE='2(x'"),
    ({"SLURM_TASKS_PER_NODE": "0(x2)"}, "SLURM_TASKS_PER_NODE='0(x2)': no task on any node"),
    ({"SLURM_JOB_CPUS_PER_NODE": "lots"}, "SLURM_JOB_CPUS_PER_NODE='lots'"),
])
def test_allocation_refuses_malformed_variables(change, message):
    with pytest.raises(ValueError) as e:
        allocation(dict(JOB, **change))
    assert message in str(e.value)


@pytest.mark.parametrize("np,want", [
    (7, [2, 2, 3]), (3, [2, 1, 0]), (1, [1, 0, 0]),
    (9, [4, 2, 3]), (14, [4, 4, 6]),   # --oversubscribe: round again from the first node
])
def test_ranks_per_node_as_hydra_places_them(np, want):
    assert ranks_per_node([2, 2, 3], np) == want


def test_omp_threads_in_takes_the_tightest_node():
    alloc = allocation(JOB)
    assert omp_threads_in(alloc, 7) == 1      # 2 CPUs // 2 ranks on n1, n2
    assert omp_threads_in(alloc, 1) == 2      # one rank, on n1's 2 CPUs
    assert omp_threads_in(allocation(dict(JOB, SLURM_JOB_CPUS_PER_NODE="8(x3)")), 7) == 2
    assert omp_threads_in(allocation(dict(JOB, SLURM_JOB_CPUS_PER_NODE="")), 7) is None


def test_np_defaults_to_the_allocation_and_is_bounded():
    assert parse_args(["python", "t.py"], environ=JOB).num_proc == 7
    assert parse_args(["-np", "3", "python", "t.py"], environ=JOB).num_proc == 3
    assert check_num_proc(allocation(JOB), 7, False) is None
    assert parse_args(["-np", "9", "--oversubscribe", "python", "t.py"], environ=JOB).num_proc == 9
    # -H/--hostfile: the user's hosts, not the allocation.
    args = parse_args(["-np", "9", "-H", "a:9", "python", "t.py"], environ=JOB)
    assert args.slurm is None and args.num_proc == 9


def test_np_beyond_the_allocation_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-np", "8", "python", "t.py"], environ=JOB)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "-np 8 is more than the 7 tasks of Slurm job 42 (nodes n[1-3], tasks per node " \
           "2(x2),3)" in err and "--oversubscribe" in err, err


def test_malformed_allocation_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["python", "t.py"], environ=dict(JOB, SLURM_TASKS_PER_NODE="?"))
    assert e.value.code == 2
    assert "inside a Slurm allocation: SLURM_TASKS_PER_NODE='?'" in capsys.readouterr().err


def test_outside_slurm_np_is_still_required(capsys):
    with pytest.raises(SystemExit):
        parse_args(["python", "t.py"], environ={})
    assert "-np/--num-proc is required" in capsys.readouterr().err


@pytest.mark.parametrize("argv,want_threads,want_marker", [
    ([], "1", "1"),                          # 2 ranks on 2 CPUs (n1, n2)
    (["-np", "1"], "2", "1"),
    (["-np", "1", "--no-rank-guard"], "2", None),   # the launcher's value, as it is
])
def test_launcher_threads_in_an_allocation(tmp_path, argv, want_threads, want_marker):
    _, env, _ = plan(tmp_path, HYDRA, argv + ["python", "t.py"], cores=64, environ=JOB)
    assert env["OMP_NUM_THREADS"] == want_threads
    assert env.get(OMP_MARKER) == want_marker


def test_users_threads_are_never_marked(tmp_path):
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "python", "t.py"],
                     environ={"OMP_NUM_THREADS": "3", OMP_MARKER: "1"})
    assert env["OMP_NUM_THREADS"] == "3" and OMP_MARKER not in env
    _, env, _ = plan(tmp_path, HYDRA, ["-np", "2", "-x", "OMP_NUM_THREADS=5", "python", "t.py"])
    assert env["OMP_NUM_THREADS"] == "5" and OMP_MARKER not in env


def _guarded_threads(env):
    """OMP_NUM_THREADS (and the marker) as the rank behind the guard sees them."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    full.update(env)
    out = subprocess.run([sys.executable, "-I", "-S", guard_path(), sys.executable, "-c",
                          "import os; print(os.environ.get('OMP_NUM_THREADS'), "
                          "os.environ.get('%s'))" % OMP_MARKER],
                         env=full, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                         timeout=60).stdout.split()
    return out[0], out[1]


def test_guard_sets_threads_from_this_hosts_cpus_and_ranks():
    cores = len(os.sched_getaffinity(0))
    marked = {"OMP_NUM_THREADS": "7", OMP_MARKER: "1"}
    # hydra's ranks on this host; Open MPI's.
    assert _guarded_threads(dict(marked, MPI_LOCALNRANKS="1")) == (str(cores), "None")
    assert _guarded_threads(dict(marked, OMPI_COMM_WORLD_LOCAL_SIZE="2")) == \
        (str(max(1, cores // 2)), "None")
    assert _guarded_threads(dict(marked, MPI_LOCALNRANKS=str(cores * 4))) == ("1", "None")
    # In Slurm: the CPUs it gave the job on this node (never more than the usable cores).
    slurm = dict(marked, MPI_LOCALNRANKS="1", SLURM_JOB_ID="5")
    assert _guarded_threads(dict(slurm, SLURM_CPUS_ON_NODE="1")) == ("1", "None")
    assert _guarded_threads(dict(slurm, SLURM_CPUS_ON_NODE=str(cores * 8))) == (str(cores), "None")
    # No marker (the user's value), or no count of this host's ranks: kept as it is.
    assert _guarded_threads({"OMP_NUM_THREADS": "7", "MPI_LOCALNRANKS": "1"}) == ("7", "None")
    assert _guarded_threads(marked) == ("7", "None")


def _fake_scontrol(tmp_path, names):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text("#!/bin/sh\n[ \"$1 $2\" = 'show hostnames' ] || exit 1\n"
                      "printf '%s\\n' " + " ".join(names) + "\n")
    script.chmod(0o755)
    return str(bin_dir)


def test_node_names_by_scontrol(tmp_path):
    path = _fake_scontrol(tmp_path, ["n1", "n2", "n3"])
    assert node_names("n[1-3]", {"PATH": path}) == ["n1", "n2", "n3"]
    assert node_names("n[1-3]", {"PATH": str(tmp_path)}) is None   # no scontrol: no answer


def test_launcher_outside_the_nodes_is_warned(tmp_path):
    alloc = allocation(JOB)
    env = {"PATH": _fake_scontrol(tmp_path, ["n1", "n2", "n3"])}
    note = outside_note(alloc, env, host="login1")
    assert "mxhorovodrun runs on login1, outside the nodes of Slurm job 42 (n[1-3])" in note
    assert "--network-interfaces" in note
    assert outside_note(alloc, env, host="n2") is None
    assert outside_note(alloc, env, host="n2.cluster.example") is None
    # Given an interface: no warning (prepare does not ask).
    _, _, notes = plan(tmp_path, HYDRA, ["--network-interfaces", "eth0", "python", "t.py"],
                       environ=dict(JOB, PATH=env["PATH"] + ":/usr/bin:/bin"))
    assert not [n for n in notes if "outside the nodes" in n], notes


def test_elastic_run_in_an_allocation_reads_it_itself():
    # --min-np/--max-np in an allocation: the elastic driver's hosts (slurm_discovery.py);
    # the -np default and bound of a plain job do not apply.
    args = parse_args(["--min-np", "2", "--max-np", "16", "python", "t.py"], environ=JOB)
    assert args.elastic and args.slurm is None and args.num_proc == 2
