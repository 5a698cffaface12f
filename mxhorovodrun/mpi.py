"""Finding the installed MPI's mpirun, telling which MPI it is, and building its command.

Flavours, told apart by ``mpirun --version``:

- MPICH's hydra (the ``mpich`` wheel that pip installs, MVAPICH): "HYDRA build details"
  (MPICH 5's hydra prints no "MPICH", which is why horovodrun 0.28.1 calls it an
  "Unknown MPI implementation"), or "MPICH".
- Open MPI: "Open MPI" or "OpenRTE".
- Intel MPI: "Intel(R) MPI".
"""
import collections
import os
import re
import shlex
import shutil
import subprocess
import sys

from mxhorovodrun.hosts import hosts_text

__all__ = ["HYDRA", "OPEN_MPI", "INTEL_MPI", "LaunchError", "MPI", "find_mpirun", "detect",
           "mpirun_command"]

HYDRA, OPEN_MPI, INTEL_MPI = "MPICH (hydra)", "Open MPI", "Intel MPI"

INSTALL_HINT = ("pip install mpich (in the Python environment of mxhorovod), or put an "
                "MPI's mpirun on PATH, or name it in MXHOROVOD_MPIRUN")

# Environment variables Open MPI's -x must not forward (horovodrun's list, plus names
# that are not plain identifiers, which -x cannot carry).
_NOT_EXPORTED = re.compile(r"^(BASH_FUNC_.*|OLDPWD|.*CUDA_VISIBLE_DEVICES)$")
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# hydra's (and Intel MPI's) choices of which variables the ranks get; hydra refuses two.
_GLOBAL_ENV_CHOICES = ("-genvall", "-genvnone", "-genvlist")


class LaunchError(Exception):
    """The job cannot be started; the message says why and what to do."""


MPI = collections.namedtuple("MPI", "path flavour version")


def find_mpirun(environ=None, python=None):
    """Path of the mpirun to use: $MXHOROVOD_MPIRUN if set, else the one next to this
    Python (a venv's mpich wheel), else the first on $PATH.

    Raises:
        LaunchError: none found, or MXHOROVOD_MPIRUN names no executable file.
    """
    environ = os.environ if environ is None else environ
    python = sys.executable if python is None else python
    chosen = environ.get("MXHOROVOD_MPIRUN")
    if chosen:
        if not (os.path.isfile(chosen) and os.access(chosen, os.X_OK)):
            raise LaunchError("MXHOROVOD_MPIRUN=%s is not an executable file" % chosen)
        return chosen
    beside = os.path.join(os.path.dirname(python), "mpirun")
    if os.path.isfile(beside) and os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpirun", path=environ.get("PATH", os.defpath))
    if not found:
        raise LaunchError("mpirun not found (not next to %s, not on PATH): %s"
                          % (python, INSTALL_HINT))
    return found


def classify(text):
    """(flavour, version) from the output of ``mpirun --version``, flavour None if unknown."""
    if "Open MPI" in text or "OpenRTE" in text:
        m = re.search(r"\(Open(?: MPI|RTE)\)\s*(\S+)", text)
        return OPEN_MPI, m.group(1) if m else ""
    if "Intel(R) MPI" in text:
        m = re.search(r"Version\s+([\w.]+)", text)
        return INTEL_MPI, m.group(1) if m else ""
    if "HYDRA build details" in text or "MPICH" in text:
        m = re.search(r"Version:\s*(\S+)", text)
        return HYDRA, m.group(1) if m else ""
    return None, ""


def detect(path, timeout=60):
    """Runs ``path --version`` and tells the MPI apart.

    Raises:
        LaunchError: it cannot run, fails, takes longer than ``timeout`` seconds, or prints
            the version of an MPI we do not know (the output is quoted).
    """
    try:
        proc = subprocess.run([path, "--version"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise LaunchError("%s --version did not answer within %d s" % (path, timeout)) from None
    except OSError as e:
        raise LaunchError("cannot run %s: %s. %s" % (path, e.strerror or e, INSTALL_HINT)) from None
    if proc.returncode != 0:
        raise LaunchError("%s --version failed (exit %d):\n%s" % (path, proc.returncode, proc.stdout))
    flavour, version = classify(proc.stdout)
    if flavour is None:
        raise LaunchError("unknown MPI implementation: %s --version printed\n%s\nmxhorovodrun "
                          "knows MPICH/hydra, Open MPI and Intel MPI; run your MPI's own "
                          "launcher directly (mpirun -np N python train.py), or point "
                          "MXHOROVOD_MPIRUN at one of those" % (path, proc.stdout.rstrip()))
    return MPI(path, flavour, version)


def _ssh_args(ssh_port, ssh_identity_file):
    args = []
    if ssh_port:
        args += ["-p", str(ssh_port)]
    if ssh_identity_file:
        args += ["-i", ssh_identity_file]
    return args


def mpirun_command(mpi, np, command, hosts=None, ssh_port=None, ssh_identity_file=None,
                   ssh_command=None, nics=(), env=None, extra_args=(), is_root=None,
                   binding_args=None, tcp=False, capture=None, output_filename=None,
                   timestamp_output=False):
    """The mpirun argv for this MPI, and the variables to add to its environment.

    Args:
        mpi: an :class:`MPI` (path, flavour, version).
        np: number of processes.
        command: the program and its arguments.
        hosts: [(host, slots), ...] with the ranks already assigned, or None for this host.
        ssh_port, ssh_identity_file: passed to ssh when mpirun starts remote processes.
        ssh_command: the program mpirun runs instead of ssh (a stand-in such as a
            network-namespace runner); None for ssh.
        nics: network interfaces for MPI's traffic (hydra and Intel MPI take one).
        env: the environment the ranks get; Open MPI forwards each variable with -x,
            hydra and Intel MPI forward all of it (-genvall, unless ``extra_args`` makes
            that choice with -genvall, -genvnone or -genvlist).
        extra_args: more mpirun arguments, placed before the command.
        is_root: running as root (Open MPI then needs --allow-run-as-root); default: euid 0.
        binding_args: mpirun's binding words in place of the default (hydra and Open MPI:
            no binding, by slot; Intel MPI: none given), or None for the default.
        tcp: only TCP between hosts (hydra: UCX_TLS=tcp,self unless ``env`` sets
            UCX_TLS; the others: a note that it has no effect).
        capture: (stdout pattern, stderr pattern) with %r for the rank, for hydra and
            Intel MPI: the files (the launcher's pipes) each rank's output goes to, in place
            of mpirun's own output with -l rank tags; None for mpirun's output.
        output_filename, timestamp_output: Open MPI's --output-filename DIR and
            --timestamp-output (hydra and Intel MPI do these through ``capture``).
    Returns:
        (argv, env_additions, notes): notes are warnings for the user (an ignored NIC).
    """
    env = {} if env is None else env
    is_root = (os.geteuid() == 0) if is_root is None else is_root
    nics = sorted(nics or ())
    ssh = _ssh_args(ssh_port, ssh_identity_file)
    argv, extra_env, notes = [mpi.path], {}, []
    if nics:
        extra_env["NCCL_SOCKET_IFNAME"] = ",".join(nics)
    if tcp and mpi.flavour == HYDRA:
        if env.get("UCX_TLS"):
            notes.append("--tcp: UCX_TLS=%s is already set; kept" % env["UCX_TLS"])
        else:
            # Only UCX's TCP transport between hosts (MPICH's own shared memory still
            # carries the data between ranks of one host).
            extra_env["UCX_TLS"] = "tcp,self"
    elif tcp:
        notes.append("--tcp: no effect with %s (mxhorovodrun sets TCP only for MPICH/hydra's "
                     "UCX; set your MPI's own transport variables)" % mpi.flavour)
    if mpi.flavour in (HYDRA, INTEL_MPI):
        argv += ([] if capture else ["-l"]) + ["-np", str(np)]
        if hosts and mpi.flavour == HYDRA:
            argv += ["-hosts", hosts_text(hosts)]
        elif hosts:
            slots = {n for _, n in hosts}
            if len(slots) != 1:
                raise LaunchError("Intel MPI's -hosts takes one number of processes per host "
                                  "(-ppn); got %s. Give every host the same slots"
                                  % hosts_text(hosts))
            argv += ["-hosts", ",".join(h for h, _ in hosts), "-ppn", str(slots.pop())]
        if binding_args is not None:
            argv += list(binding_args)
        elif mpi.flavour == HYDRA:
            argv += ["-bind-to", "none", "-map-by", "slot"]
        if capture:
            argv += ["-outfile-pattern", capture[0], "-errfile-pattern", capture[1]]
        if not any(a in _GLOBAL_ENV_CHOICES for a in extra_args):
            # Said explicitly although it is hydra's default: ssh (or a stand-in) starts the
            # remote proxy with a bare login environment, and a site's HYDRA_ENV=none would
            # then leave the ranks on other hosts without HOROVOD_*, PYTHONPATH or PATH.
            argv.append("-genvall")
        launcher = "-launcher" if mpi.flavour == HYDRA else "-bootstrap"
        if ssh_command or ssh:
            argv += [launcher, "ssh"]
        if ssh_command:
            argv += [launcher + "-exec", ssh_command]
        if ssh and mpi.flavour == HYDRA:
            # hydra's ssh launcher adds these words to every ssh command line.
            extra_env["HYDRA_LAUNCHER_EXTRA_ARGS"] = " ".join(shlex.quote(a) for a in ssh)
        elif ssh:
            argv += ["-bootstrap-exec-args", " ".join(shlex.quote(a) for a in ssh)]
        if nics:
            argv += ["-iface", nics[0]]
            if len(nics) > 1:
                notes.append("%s takes one network interface: using %s, not %s"
                             % (mpi.flavour, nics[0], ", ".join(nics[1:])))
    else:  # Open MPI
        if is_root:
            argv.append("--allow-run-as-root")
        argv += ["--tag-output", "-np", str(np),
                 "-H", hosts_text(hosts) if hosts else "localhost:%d" % np]
        argv += list(binding_args) if binding_args is not None else \
            ["--bind-to", "none", "--map-by", "slot"]
        if output_filename:
            argv += ["--output-filename", output_filename]
        if timestamp_output:
            argv.append("--timestamp-output")
        if ssh_command:
            argv += ["-mca", "plm_rsh_agent", ssh_command]
        if ssh:
            argv += ["-mca", "plm_rsh_args", " ".join(shlex.quote(a) for a in ssh)]
        if nics:
            argv += ["-mca", "btl_tcp_if_include", ",".join(nics)]
        for name in sorted(set(env) | set(extra_env)):
            if _IDENTIFIER.match(name) and not _NOT_EXPORTED.match(name):
                argv += ["-x", name]
    argv += list(extra_args) + list(command)
    return argv, extra_env, notes
