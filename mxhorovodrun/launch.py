"""mxhorovodrun's main: parse horovodrun's flags, find and identify mpirun, check the hosts
(with --start-timeout), build the ranks' environment, then replace this process with mpirun
(its exit status is ours; Open MPI) or, under hydra, with the output relay: a light Python
that runs output.py, starts mpirun as its child and relays each rank's output line by line."""
import ast
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import tempfile

from mxhorovodrun.args import parse_args
from mxhorovodrun.check_build import check_build_text
from mxhorovodrun.command import captures_output, hosts_of, prepare
from mxhorovodrun.elastic_driver import run_elastic
from mxhorovodrun.mpi import LaunchError
from mxhorovodrun.output import relay_command, remove_when_gone, run_captured
from mxhorovodrun.startup import DEFAULT_START_TIMEOUT, Deadline, check_hosts

__all__ = ["prepare", "package_version", "main", "run_commandline"]

log = logging.getLogger("mxhorovodrun")


def package_version():
    """mxhorovod's ``__version__``, read from its ``__init__.py`` without running it
    (running it imports MXNet and the extension: seconds, for one line of text).

    Raises:
        LookupError: no mxhorovod package, or no ``__version__ = "..."`` in it.
    """
    spec = importlib.util.find_spec("mxhorovod")  # finds the file; runs nothing
    if spec is None or not spec.origin or not os.path.isfile(spec.origin):
        raise LookupError("the package mxhorovod is not installed beside mxhorovodrun")
    with open(spec.origin, encoding="utf-8") as f:
        tree = ast.parse(f.read(), spec.origin)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Name) and t.id == "__version__" for t in node.targets):
            return ast.literal_eval(node.value)
    raise LookupError("no __version__ in %s" % spec.origin)


class _Stderr(logging.StreamHandler):
    """Writes to sys.stderr as it is at each message, not as it was when main first ran
    (main may run more than once in a process: tests replace sys.stderr in between)."""

    @property
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, _value):
        pass


def _setup_logging(verbose):
    if not log.handlers:
        handler = _Stderr()
        handler.setFormatter(logging.Formatter("mxhorovodrun: %(message)s"))
        log.addHandler(handler)
        log.propagate = False
    log.setLevel(logging.INFO if verbose else logging.WARNING)


def main(argv=None, execve=os.execve, popen=None):
    """Runs mxhorovodrun with ``argv`` (default sys.argv[1:]). Does not return when it
    starts the job: by exec of mpirun (Open MPI: the process becomes mpirun) or of the
    output relay (hydra: a Python of its own runs mxhorovodrun/output.py, mpirun its
    child; see :func:`mxhorovodrun.output.relay_command`). With ``popen`` (tests) the
    relay runs in this process instead, starting mpirun by ``popen``, and main returns
    mpirun's exit status. Returns 0 after --version or --check-build, 1 when the job cannot
    start (the reason is printed). Bad flags exit with status 2. Imports mxhorovod (and so
    MXNet) for --check-build only."""
    args = parse_args(argv)
    # horovodrun's --start-timeout: its checks (here: mpirun --version, and the remote
    # hosts when a timeout is given) must finish within it.
    deadline = Deadline(args.start_timeout or DEFAULT_START_TIMEOUT)
    _setup_logging(args.verbose)
    if args.version:
        try:
            print(package_version())
        except (LookupError, OSError, SyntaxError, ValueError) as e:
            log.error("error: cannot tell mxhorovod's version: %s", e)
            return 1
        return 0
    if args.check_build:  # imports mxhorovod, and so MXNet: only here
        try:
            print(check_build_text(verbose=args.verbose))
        except ImportError as e:  # mxhorovod's own message: what to install or set
            log.error("error: mxhorovod cannot be imported: %s", e)
            return 1
        return 0
    if getattr(args, "elastic", False):  # elastic training: a driver runs the jobs
        return run_elastic(args, popen=popen or subprocess.Popen)
    capture_dir = tempfile.mkdtemp(prefix="mxhorovodrun-")  # removed unless captures_output
    # Removes capture_dir once this process, or the relay it becomes, has gone: also after
    # a SIGKILL, which left it in /tmp (the relay removes it itself at any other end).
    cleanup = remove_when_gone(capture_dir)
    try:
        return _start(args, deadline, capture_dir, cleanup, execve, popen)
    finally:
        if cleanup is not None:
            os.close(cleanup)  # not reached after an exec: the relay holds it to its end


def _start(args, deadline, capture_dir, cleanup, execve, popen):
    """main's part once ``capture_dir`` exists (``cleanup``: its remove_when_gone)."""
    try:
        mpi, cmd, env, notes = prepare(args, capture_dir=capture_dir, timeout=deadline.left())
        if args.start_timeout:
            problems = check_hosts(hosts_of(args), deadline, ssh_command=args.ssh_command,
                                   ssh_port=args.ssh_port,
                                   ssh_identity_file=args.ssh_identity_file, environ=env)
            if problems:
                raise LaunchError("; ".join(problems))
    except (LaunchError, ValueError) as e:
        shutil.rmtree(capture_dir, ignore_errors=True)
        log.error("error: %s", e)
        return 1
    for note in notes:
        log.warning("warning: %s", note)
    log.info("%s %s: %s", mpi.flavour, mpi.version, mpi.path)
    if args.horovod_alias:
        log.info("--horovod-alias: the ranks' PYTHONPATH is %s", env.get("PYTHONPATH"))
    log.info("%s", " ".join(shlex.quote(a) for a in cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    if captures_output(mpi) and popen is not None:
        try:
            return run_captured(cmd, env, args.num_proc, capture_dir,
                                output_filename=args.output_filename,
                                timestamps=args.prefix_output_with_timestamp, popen=popen)
        except OSError as e:
            log.error("error: %s", e)
            return 1
    if captures_output(mpi):
        cmd = relay_command(sys.executable, cmd, args.num_proc, capture_dir,
                            output_filename=args.output_filename,
                            timestamps=args.prefix_output_with_timestamp)
        if cleanup is not None:
            os.set_inheritable(cleanup, True)  # kept by the relay; its mpirun does not get it
    else:
        shutil.rmtree(capture_dir, ignore_errors=True)
    try:
        execve(cmd[0], cmd, env)
    except OSError as e:
        shutil.rmtree(capture_dir, ignore_errors=True)
        log.error("error: cannot run %s: %s", cmd[0], e.strerror or e)
        return 1
    return 0  # only when execve was replaced (tests)


def run_commandline():
    """Entry point of the ``mxhorovodrun`` console script."""
    return main()
