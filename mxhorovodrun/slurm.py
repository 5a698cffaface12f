"""The Slurm allocation mxhorovodrun runs in, from the variables Slurm gives a job's shell.

Inside an allocation (``sbatch``, ``salloc``, or a step of one: SLURM_JOB_ID and
SLURM_JOB_NODELIST set), MPICH's hydra finds the nodes itself and starts its proxies
through ``srun``; mxhorovodrun only needs the numbers: how many tasks the allocation has
(the default of -np, and its bound unless --oversubscribe), and how many tasks and CPUs
each node has (the threads per rank when the ranks run without the rank guard). Slurm's
counts per node come compressed: ``2(x3),1`` is 2, 2, 2, 1, in the order of the nodes.
Standard library only.
"""
import collections
import shutil
import socket
import subprocess

from mxhorovodrun.slurm_discovery import in_allocation, tasks_per_node

__all__ = ["Allocation", "allocation", "expand_counts", "ranks_per_node", "check_num_proc",
           "omp_threads_in", "node_names", "outside_note"]


Allocation = collections.namedtuple("Allocation", "job_id nodelist ntasks tasks_per_node "
                                                  "cpus_per_node")
Allocation.__doc__ = """A Slurm allocation: ``job_id`` and ``nodelist`` (Slurm's compressed
form, e.g. ``h[1-2]``) as given; ``ntasks`` the tasks in all; ``tasks_per_node`` and
``cpus_per_node`` lists of ints, one per node in the order of the node list
(``cpus_per_node`` None when Slurm did not say)."""


def expand_counts(text, name="SLURM_TASKS_PER_NODE"):
    """Slurm's compressed counts per node as a list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``
    (:func:`mxhorovodrun.slurm_discovery.tasks_per_node`, which the elastic driver uses).

    Raises:
        ValueError: empty text, an item that is not ``N`` or ``N(xK)``, or K of 0; the
            message names the variable ``name`` and its value.
    """
    try:
        return tasks_per_node(text)
    except ValueError:
        raise ValueError("%s=%r: expected counts per node such as 2(x3),1"
                         % (name, text)) from None


def allocation(environ):
    """The :class:`Allocation` that ``environ`` (a job's environment) is inside, or None
    outside one (SLURM_JOB_ID, or SLURM_JOB_NODELIST and SLURM_NODELIST, unset or empty).

    The tasks in all: SLURM_NTASKS (else SLURM_NPROCS, else the sum of the tasks per node;
    ``sbatch -N2`` without -n sets neither); per node: SLURM_TASKS_PER_NODE; CPUs per node:
    SLURM_JOB_CPUS_PER_NODE.

    Raises:
        ValueError: a variable that is not in Slurm's format (the message names it).
    """
    if not in_allocation(environ):
        return None
    job_id = environ["SLURM_JOB_ID"]
    nodelist = environ.get("SLURM_JOB_NODELIST") or environ["SLURM_NODELIST"]
    per_node = expand_counts(environ.get("SLURM_TASKS_PER_NODE", ""))
    ntasks = sum(per_node)
    if ntasks < 1:
        raise ValueError("SLURM_TASKS_PER_NODE=%r: no task on any node (expected counts per "
                         "node such as 2(x3),1, at least one of them >= 1)"
                         % environ.get("SLURM_TASKS_PER_NODE", ""))
    for name in ("SLURM_NTASKS", "SLURM_NPROCS"):
        text = environ.get(name, "").strip()
        if text:
            if not text.isdigit() or int(text) < 1:
                raise ValueError("%s=%r: expected the number of tasks (an integer >= 1)"
                                 % (name, environ[name]))
            ntasks = int(text)
            break
    cpus = environ.get("SLURM_JOB_CPUS_PER_NODE", "").strip()
    cpus_per_node = expand_counts(cpus, "SLURM_JOB_CPUS_PER_NODE") if cpus else None
    if cpus_per_node is not None and len(cpus_per_node) != len(per_node):
        cpus_per_node = None  # not one count per node: not to be trusted node by node
    return Allocation(job_id, nodelist, ntasks, per_node, cpus_per_node)


def ranks_per_node(tasks_per_node, np):
    """How many of ``np`` ranks each node runs, as hydra places them in an allocation: the
    nodes in order, each up to its tasks; past the allocation (--oversubscribe) the same
    again from the first node. A list as long as ``tasks_per_node`` (0 for a node left
    out)."""
    out = [0] * len(tasks_per_node)
    left = np
    while left > 0 and any(tasks_per_node):
        for i, slots in enumerate(tasks_per_node):
            take = min(slots, left)
            out[i] += take
            left -= take
    return out


def check_num_proc(alloc, np, oversubscribe):
    """None when ``np`` ranks fit ``alloc`` (or ``oversubscribe``), else the error text:
    what the allocation has and the two ways out."""
    if np <= alloc.ntasks or oversubscribe:
        return None
    return ("-np %d is more than the %d tasks of Slurm job %s (nodes %s, tasks per node %s): "
            "ask Slurm for more (sbatch -n/--ntasks-per-node), or pass --oversubscribe to run "
            "%d ranks on these tasks' CPUs anyway"
            % (np, alloc.ntasks, alloc.job_id, alloc.nodelist,
               _compress(alloc.tasks_per_node), np))


def _compress(counts):
    """[2, 2, 2, 1] -> '2(x3),1' (Slurm's form)."""
    out = []
    for count in counts:
        if out and out[-1][0] == count:
            out[-1][1] += 1
        else:
            out.append([count, 1])
    return ",".join("%d(x%d)" % (c, k) if k > 1 else str(c) for c, k in out)


def omp_threads_in(alloc, np):
    """OpenMP threads per rank that fit every node of ``alloc`` running ``np`` ranks: the
    least of a node's CPUs // its ranks (at least 1), or None when Slurm did not give the
    CPUs per node. The launcher's value, used as given when the ranks run without the rank
    guard (with it, each node's guard works it out for itself)."""
    if alloc.cpus_per_node is None:
        return None
    fits = [max(1, cpus // ranks) for cpus, ranks in
            zip(alloc.cpus_per_node, ranks_per_node(alloc.tasks_per_node, np)) if ranks]
    return min(fits) if fits else None


def node_names(nodelist, environ, timeout=10):
    """The host names of Slurm's compressed ``nodelist`` (``h[1-2],x`` -> h1, h2, x), by
    ``scontrol show hostnames`` (present wherever Slurm's clients are; Slurm's own parser,
    so every form it writes is read), or None when it cannot tell (no scontrol, an error,
    no answer within ``timeout`` seconds)."""
    scontrol = shutil.which("scontrol", path=environ.get("PATH"))
    if scontrol is None:
        return None
    try:
        proc = subprocess.run([scontrol, "show", "hostnames", nodelist], env=environ,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                              timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    names = proc.stdout.split()
    return names if proc.returncode == 0 and names else None


def outside_note(alloc, environ, host=None):
    """A warning when the launcher runs outside the allocation's nodes (``salloc`` on a
    login node) without --network-interfaces, else None. hydra's proxies on the nodes
    connect back to the launcher by its host name; where the nodes cannot resolve or reach
    it, hydra waits for ever (seen: "unable to get host address for <login>")."""
    host = host or socket.gethostname()
    names = node_names(alloc.nodelist, environ)
    if names is None or host in names or host.split(".")[0] in names:
        return None
    return ("mxhorovodrun runs on %s, outside the nodes of Slurm job %s (%s): hydra's "
            "proxies there connect back to this host, and hydra waits for ever if they "
            "cannot resolve or reach it. If the job does not start, pass "
            "--network-interfaces with the interface the nodes reach this host on"
            % (host, alloc.job_id, alloc.nodelist))
