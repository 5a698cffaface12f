"""mxhorovodrun's command line: horovodrun 0.28.1's flag names, meanings and defaults for
everything that applies to an MPI job, plus --ssh-command and -x."""
import argparse
import os
import shlex

from mxhorovodrun.guard import rank_guard_setting
from mxhorovodrun.horovod_alias import alias_setting
from mxhorovodrun.settings import LOG_LEVELS
from mxhorovodrun.slurm import allocation, check_num_proc
from mxhorovodrun.slurm_discovery import in_allocation

__all__ = ["REFUSED", "build_parser", "parse_args"]

# horovodrun flags that this launcher refuses: (names, values taken, why); the first name
# gives the dest.
_REFUSED_FLAGS = [
    (("--config-file",), None, "--config-file: not supported; give the options as flags (the "
                               "same names as horovodrun's)"),
    (("--jsrun",), 0, "--jsrun: LSF's jsrun is not supported; mxhorovodrun launches with mpirun")]
REFUSED = {names[0][2:].replace("-", "_"): why for names, _, why in _REFUSED_FLAGS}  # by dest

_EPILOG = """\
environment:
  MXHOROVOD_MPIRUN         the mpirun to use (default: the one next to this Python, then PATH)
  MXHOROVOD_SSH_COMMAND    default of --ssh-command
  HOROVOD_START_TIMEOUT    default of --start-timeout
  MXHOROVOD_RANK_GUARD     0: the default of --no-rank-guard (default 1: the guard)
  MXHOROVOD_HOROVOD_ALIAS  1: the default of --horovod-alias (default 0: no alias)
  SLURM_NTASKS             in a Slurm allocation: the default and bound of -np

mxhorovodrun runs mpirun with -np N and the HOROVOD_* variables of the flags, and
OMP_NUM_THREADS = cores / ranks per host when it is not set (each host's own cores and
ranks: the rank guard works it out on each host; in Slurm, the CPUs Slurm gave the job on
that node); its exit status is mpirun's.
Each rank runs under mxhorovod/rank_guard.py (see --no-rank-guard).
With --output-filename or --prefix-output-with-timestamp (MPICH/hydra, Intel MPI) it stays
the parent of mpirun and reads each rank's output through its own pipe.
"""


def _at_least(kind, low):
    def parse(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                "%r is not %s" % (text, "an integer" if kind is int else "a number")) from None
        if value < low:
            raise argparse.ArgumentTypeError("%s must be >= %s" % (text, low))
        return value
    return parse


def _nonnegative(kind):
    return _at_least(kind, 0)


_positive_int = _at_least(int, 1)


def _core_list(text):
    """HOROVOD_THREAD_AFFINITY's form: comma-separated non-negative integers."""
    words = [w.strip() for w in text.split(",")]
    if not all(w.isdigit() for w in words):
        raise argparse.ArgumentTypeError("%r is not a comma-separated list of core ids" % text)
    return ",".join(words)


class _Interfaces(argparse.Action):
    """--network-interfaces eth0,eth1 / --network-interface eth0 (repeatable): a set."""

    def __call__(self, parser, namespace, values, option_string=None):
        current = set(getattr(namespace, self.dest, None) or ())
        current.update(v for v in values.split(",") if v)
        setattr(namespace, self.dest, current)


def build_parser():
    p = argparse.ArgumentParser(
        prog="mxhorovodrun", epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run a training script on N processes with the installed MPI "
                    "(horovodrun's flags).")
    p.add_argument("-v", "--version", action="store_true",
                   help="Shows the mxhorovod version.")
    p.add_argument("-np", "--num-proc", dest="num_proc", type=_positive_int,
                   help="Total number of training processes. Inside a Slurm allocation "
                        "without -H/--hostfile: the allocation's tasks (SLURM_NTASKS) by "
                        "default, and at most that many unless --oversubscribe.")
    p.add_argument("--oversubscribe", action="store_true",
                   help="Inside a Slurm allocation: allow -np to exceed the allocation's "
                        "tasks (the extra ranks share the allocated CPUs). Without it, such "
                        "an -np is refused.")
    p.add_argument("-cb", "--check-build", action="store_true", dest="check_build",
                   help="Shows the MXNet version this build was made against, the MPI "
                        "found, and which frameworks, controllers and tensor operations "
                        "are built in.")
    p.add_argument("--disable-cache", action="store_true", dest="disable_cache",
                   help="Accepted for horovodrun compatibility: mxhorovodrun caches nothing.")
    p.add_argument("--start-timeout", dest="start_timeout", type=_positive_int,
                   metavar="SECONDS",
                   help="Seconds within which the launcher's checks must pass: finding and "
                        "identifying mpirun, and each remote host of -H/--hostfile answering "
                        "through ssh (or --ssh-command), checked in parallel only when a "
                        "timeout is given; a host that fails or does not answer in time is "
                        "named and nothing starts. Alternatively HOROVOD_START_TIMEOUT. "
                        "(default: 30, no host check)")
    p.add_argument("--network-interfaces", "--network-interface", dest="nics",
                   action=_Interfaces, metavar="NICS",
                   help="Network interfaces MPI uses, comma-separated (hydra and Intel MPI "
                        "take the first one: -iface). Example: --network-interfaces eth0.")
    p.add_argument("--output-filename", dest="output_filename", metavar="DIR",
                   help="Writes each rank's stdout and stderr also to "
                        "DIR/rank.<rank>/stdout and DIR/rank.<rank>/stderr on this host (the "
                        "rank padded with 0s for lexicographical order; the directories are "
                        "created). Open MPI: its own --output-filename DIR "
                        "(DIR/1/rank.N/stdout).")
    p.add_argument("--verbose", action="store_true",
                   help="Prints the MPI found and the mpirun command line.")
    guard = p.add_mutually_exclusive_group()
    guard.add_argument("--no-rank-guard", dest="rank_guard", action="store_const", const=False,
                       help="Run the command as given, not under mxhorovod/rank_guard.py. By "
                            "default each rank's command runs as PYTHON -I -S "
                            "/path/to/mxhorovod/rank_guard.py COMMAND (this Python; the same "
                            "paths on every host): a rank that ends after hvd.init() without "
                            "finalizing MPI (os._exit) is named and the job fails, where it "
                            "exited 0 (mpirun kills the other ranks silently); a rank killed by a "
                            "signal is named. Alternatively MXHOROVOD_RANK_GUARD=0.")
    guard.add_argument("--rank-guard", dest="rank_guard", action="store_const", const=True,
                       help=argparse.SUPPRESS)
    alias = p.add_mutually_exclusive_group()
    alias.add_argument("--horovod-alias", dest="horovod_alias", action="store_const",
                       const=True,
                       help="Scripts written for Horovod run unchanged: in the ranks, import "
                            "horovod.mxnet (and horovod.mxnet.mpi_ops, .functions, "
                            ".compression) gives mxhorovod. The ranks' PYTHONPATH starts with "
                            "the folder mxhorovod/horovod_alias, which holds a package named "
                            "horovod; the other subpackages of an installed Horovod "
                            "(horovod.torch, ...) stay its own. Nothing is installed. "
                            "Alternatively MXHOROVOD_HOROVOD_ALIAS=1.")
    alias.add_argument("--no-horovod-alias", dest="horovod_alias", action="store_const",
                       const=False, help=argparse.SUPPRESS)
    p.add_argument("--mpi", action="store_true", dest="use_mpi",
                   help="Use MPI (the only controller of mxhorovod; the default).")
    p.add_argument("--gloo", action="store_true", dest="use_gloo",
                   help="Refused: mxhorovod has no Gloo controller.")
    p.add_argument("--mpi-args", dest="mpi_args",
                   help='More mpirun arguments, e.g. --mpi-args="-genv FOO 1".')
    p.add_argument("--tcp", action="store_true", dest="tcp_flag",
                   help="Only TCP between hosts: MPICH/hydra's UCX gets UCX_TLS=tcp,self "
                        "(unless UCX_TLS is set); ranks of one host still share memory. "
                        "Open MPI, Intel MPI: no effect (a warning says so).")
    p.add_argument("--binding-args", dest="binding_args",
                   help="Process binding arguments for mpirun, in place of the default "
                        "(no binding: -bind-to none -map-by slot), e.g. "
                        '--binding-args="-bind-to core -map-by core".')
    p.add_argument("-x", dest="env", action="append", default=[], metavar="NAME[=VALUE]",
                   help="Set (with =VALUE) and forward an environment variable to every "
                        "rank (repeatable).")
    p.add_argument("command", nargs=argparse.REMAINDER, help="Command to be executed.")

    ssh = p.add_argument_group("SSH arguments")
    ssh.add_argument("-p", "--ssh-port", dest="ssh_port", type=_positive_int,
                     help="SSH port on all the hosts.")
    ssh.add_argument("-i", "--ssh-identity-file", dest="ssh_identity_file",
                     help="File from which ssh reads the identity (private key).")
    ssh.add_argument("--ssh-command", dest="ssh_command",
                     default=os.environ.get("MXHOROVOD_SSH_COMMAND") or None,
                     help="Program that mpirun runs instead of ssh to start the remote "
                          "processes, called like ssh (options, host, command); e.g. a "
                          "stand-in that enters a network namespace (default: "
                          "$MXHOROVOD_SSH_COMMAND).")

    tune = p.add_argument_group("tuneable parameter arguments")
    tune.add_argument("--fusion-threshold-mb", type=_nonnegative(int),
                      help="Fusion buffer threshold in MB (HOROVOD_FUSION_THRESHOLD, in "
                           "bytes). 0 disables tensor fusion. (default: 128)")
    tune.add_argument("--cycle-time-ms", type=_nonnegative(float),
                      help="Cycle time in ms between negotiation cycles (HOROVOD_CYCLE_TIME). "
                           "(default: 1)")
    tune.add_argument("--cache-capacity", type=_nonnegative(int),
                      help="Response cache entries (HOROVOD_CACHE_CAPACITY); 0 turns the "
                           "cache off. (default: 1024)")
    hier = tune.add_mutually_exclusive_group()
    hier.add_argument("--hierarchical-allreduce", dest="hierarchical_allreduce",
                      action="store_const", const=True,
                      help="Sets HOROVOD_HIERARCHICAL_ALLREDUCE=1: allreduce within each "
                           "host, across hosts (one rank per host), then within the host.")
    hier.add_argument("--no-hierarchical-allreduce", dest="hierarchical_allreduce",
                      action="store_const", const=False, help=argparse.SUPPRESS)

    lib = p.add_argument_group("library arguments")
    threads = lib.add_mutually_exclusive_group()
    threads.add_argument("--mpi-threads-disable", dest="mpi_threads_disable",
                         action="store_const", const=True,
                         help="Sets HOROVOD_MPI_THREADS_DISABLE=1; no effect (a warning says "
                              "so): the core makes MPI calls from its background thread and "
                              "from the caller's (MPI_Finalize, MPI_Abort), so it always "
                              "requests MPI_THREAD_MULTIPLE.")
    threads.add_argument("--no-mpi-threads-disable", dest="mpi_threads_disable",
                         action="store_const", const=False, help=argparse.SUPPRESS)
    lib.add_argument("--num-nccl-streams", dest="num_nccl_streams", type=_positive_int,
                     help="Sets HOROVOD_NUM_NCCL_STREAMS; no effect (a warning says so): "
                          "mxhorovod has no NCCL (CPU only). (default: 1)")
    lib.add_argument("--thread-affinity", dest="thread_affinity", type=_core_list,
                     help="Sets HOROVOD_THREAD_AFFINITY: core ids, comma-separated, one per "
                          "local rank: the background thread of local rank i runs on the "
                          "i-th (horovodrun takes one id: enough for one rank per host).")
    lib.add_argument("--gloo-timeout-seconds", dest="gloo_timeout_seconds",
                     type=_nonnegative(int),
                     help="Sets HOROVOD_GLOO_TIMEOUT_SECONDS; no effect (a warning says so): "
                          "no Gloo.")
    for name, var in (("hierarchical-allgather", "HOROVOD_HIERARCHICAL_ALLGATHER"),
                      ("torus-allreduce", "HOROVOD_TORUS_ALLREDUCE")):
        dest = name.replace("-", "_")
        flags = lib.add_mutually_exclusive_group()
        flags.add_argument("--" + name, dest=dest, action="store_const", const=True,
                           help="Sets %s=1; no effect (a warning says so)." % var)
        flags.add_argument("--no-" + name, dest=dest, action="store_const", const=False,
                           help=argparse.SUPPRESS)
    elastic = p.add_argument_group(
        "elastic arguments", "Elastic training (hvd.elastic in the script): each job is one "
        "mpirun; when a host is lost or added the job ends and the next starts from the last "
        "commit (see docs/elastic.md).")
    elastic.add_argument("--min-np", "--min-num-proc", dest="min_np", type=_positive_int,
                         help="Fewest processes to run with; below it for longer than "
                              "--elastic-timeout the job ends. (default: -np)")
    elastic.add_argument("--max-np", "--max-num-proc", dest="max_np", type=_positive_int,
                         help="Most processes to run with. (default: no bound)")
    elastic.add_argument("--slots-per-host", dest="slots_per_host", type=_positive_int,
                         help="Slots of a host that the discovery script prints without "
                              "':slots'. (default: 1)")
    elastic.add_argument("--elastic-timeout", dest="elastic_timeout", type=_positive_int,
                         metavar="SECONDS",
                         help="Seconds to wait for --min-np slots (at start and after a "
                              "host was lost) before the job ends. Alternatively "
                              "HOROVOD_ELASTIC_TIMEOUT. (default: 600)")
    elastic.add_argument("--reset-limit", dest="reset_limit", type=_nonnegative(int),
                         help="Most resets (restarts on other hosts) before the job ends. "
                              "(default: no limit)")
    elastic.add_argument("--blacklist-cooldown-range", dest="blacklist_cooldown_range",
                         type=_nonnegative(int), nargs=2, metavar=("MIN", "MAX"),
                         help="Seconds a failed host is left out: MIN the first time, "
                              "doubling at each failure up to MAX. (default: for good)")
    # horovodrun's LSF and config-file flags: refused (REFUSED says why).
    refused = p.add_argument_group("refused horovodrun arguments")
    for names, nargs, _ in _REFUSED_FLAGS:
        extra = {"action": "store_true"} if nargs == 0 else {"nargs": nargs}
        refused.add_argument(*names, dest=names[0][2:].replace("-", "_"),
                             help="Refused, with the reason.", **extra)

    auto = p.add_argument_group("autotune arguments")
    tuning = auto.add_mutually_exclusive_group()
    tuning.add_argument("--autotune", dest="autotune", action="store_const", const=True,
                        help="Tune the fusion threshold, cycle time, slice size and "
                             "zero-copy size while the job runs (HOROVOD_AUTOTUNE=1); "
                             "parameters given explicitly are the starting point.")
    tuning.add_argument("--no-autotune", dest="autotune", action="store_const", const=False,
                        help=argparse.SUPPRESS)
    auto.add_argument("--autotune-log-file",
                      help="CSV log of the samples and the best values (HOROVOD_AUTOTUNE_LOG).")
    auto.add_argument("--autotune-warmup-samples", type=_nonnegative(int),
                      help="Samples discarded before tuning (HOROVOD_AUTOTUNE_WARMUP_SAMPLES). "
                           "(default: 1)")
    auto.add_argument("--autotune-steps-per-sample", type=_nonnegative(int),
                      help="Training steps per sample (HOROVOD_AUTOTUNE_STEPS_PER_SAMPLE). "
                           "(default: 10)")
    auto.add_argument("--autotune-bayes-opt-max-samples", type=_nonnegative(int),
                      help="Sets HOROVOD_AUTOTUNE_BAYES_OPT_MAX_SAMPLES (mxhorovod's "
                           "autotuner is a grid search: no effect).")
    auto.add_argument("--autotune-gaussian-process-noise", type=_nonnegative(float),
                      help="Sets HOROVOD_AUTOTUNE_GAUSSIAN_PROCESS_NOISE (no effect, as above).")

    timeline = p.add_argument_group("timeline arguments")
    timeline.add_argument("--timeline-filename",
                          help="JSON file of the timeline of events (HOROVOD_TIMELINE).")
    marks = timeline.add_mutually_exclusive_group()
    marks.add_argument("--timeline-mark-cycles", dest="timeline_mark_cycles",
                       action="store_const", const=True,
                       help="Mark cycles on the timeline (HOROVOD_TIMELINE_MARK_CYCLES).")
    marks.add_argument("--no-timeline-mark-cycles", dest="timeline_mark_cycles",
                       action="store_const", const=False, help=argparse.SUPPRESS)

    stall = p.add_argument_group("stall check arguments")
    enabled = stall.add_mutually_exclusive_group()
    enabled.add_argument("--no-stall-check", dest="no_stall_check",
                         action="store_const", const=True,
                         help="Disable the stall check (HOROVOD_STALL_CHECK_DISABLE=1).")
    enabled.add_argument("--stall-check", dest="no_stall_check",
                         action="store_const", const=False, help=argparse.SUPPRESS)
    stall.add_argument("--stall-check-warning-time-seconds", type=_nonnegative(int),
                       help="Seconds until the stall warning is logged "
                            "(HOROVOD_STALL_CHECK_TIME_SECONDS). (default: 60)")
    stall.add_argument("--stall-check-shutdown-time-seconds", type=_nonnegative(int),
                       help="Seconds until a stalled job is shut down "
                            "(HOROVOD_STALL_SHUTDOWN_TIME_SECONDS); 0: never. (default: 0)")

    log = p.add_argument_group("logging arguments")
    log.add_argument("--prefix-output-with-timestamp", action="store_true",
                     dest="prefix_output_with_timestamp",
                     help="Puts the time (horovodrun's time.asctime() format) before each "
                          "line the ranks write, on the console and in --output-filename's "
                          "files. Open MPI: its own --timestamp-output.")
    log.add_argument("--log-level", choices=LOG_LEVELS, type=str.upper,
                     help="Minimum level of the backend's log (HOROVOD_LOG_LEVEL), in any "
                          "case (info or INFO). (default: WARNING)")
    stamp = log.add_mutually_exclusive_group()
    stamp.add_argument("--log-without-timestamp", dest="log_with_timestamp",
                       action="store_const", const=False,
                       help="Hide the timestamp of the log (HOROVOD_LOG_HIDE_TIME=1).")
    stamp.add_argument("--log-with-timestamp", dest="log_with_timestamp",
                       action="store_const", const=True, help=argparse.SUPPRESS)
    # horovodrun's names before 0.21.0, which it still takes
    stamp.add_argument("--log-hide-timestamp", dest="log_with_timestamp",
                       action="store_const", const=False, help=argparse.SUPPRESS)
    stamp.add_argument("--no-log-hide-timestamp", dest="log_with_timestamp",
                       action="store_const", const=True, help=argparse.SUPPRESS)

    hosts = p.add_argument_group("host arguments").add_mutually_exclusive_group()
    hosts.add_argument("-H", "--hosts", dest="hosts",
                       help="Hosts and their slots: host1:2,host2:4 (a bare name: 1 slot). "
                            "Default: this host, -np slots.")
    hosts.add_argument("-hostfile", "--hostfile", dest="hostfile",
                       help="File of hosts, one a line: 'host slots=N' (or host:N).")
    hosts.add_argument("--host-discovery-script", dest="host_discovery_script",
                       metavar="SCRIPT",
                       help="Elastic training: an executable that prints the hosts now "
                            "available, one 'host:slots' (or 'host') a line; run at start "
                            "and every second during the job.")
    return p


def _check_elastic(parser, args, environ):
    """The elastic flags: with --host-discovery-script, or inside a Slurm allocation with
    neither -H nor --hostfile (the allocation's nodes: slurm_discovery.py); -np defaults to
    --min-np. Sets ``args.elastic``."""
    given = [flag for flag, dest in (("--min-np", "min_np"), ("--max-np", "max_np"),
                                     ("--slots-per-host", "slots_per_host"),
                                     ("--elastic-timeout", "elastic_timeout"),
                                     ("--reset-limit", "reset_limit"),
                                     ("--blacklist-cooldown-range", "blacklist_cooldown_range"))
             if getattr(args, dest) is not None]
    from_allocation = bool(given) and not (args.hosts or args.hostfile) and \
        in_allocation(environ)
    args.elastic = bool(args.host_discovery_script) or from_allocation
    if not args.elastic:
        if given:
            parser.error("%s: elastic training needs --host-discovery-script (a script that "
                         "prints the available hosts, one 'host:slots' a line), or a Slurm "
                         "allocation (sbatch, salloc) to take the hosts from" % given[0])
        return
    if from_allocation and args.num_proc is None and args.min_np is None:
        parser.error("elastic training in a Slurm allocation needs --min-np (or -np): the "
                     "fewest ranks to train on")
    if args.num_proc is None:
        args.num_proc = args.min_np
    if args.num_proc is None:
        parser.error("elastic training needs -np or --min-np")
    if args.min_np is None:
        args.min_np = args.num_proc
    if args.max_np is not None and args.max_np < args.min_np:
        parser.error("--max-np %d is less than --min-np %d" % (args.max_np, args.min_np))
    if from_allocation:
        _check_elastic_allocation(parser, args, environ)
    if args.elastic_timeout is None:
        args.elastic_timeout = _seconds_from_env(parser, environ, "HOROVOD_ELASTIC_TIMEOUT")
    low_high = args.blacklist_cooldown_range
    if low_high is not None and low_high[0] > low_high[1]:
        parser.error("--blacklist-cooldown-range %d %d: MIN is more than MAX" % tuple(low_high))


def _check_elastic_allocation(parser, args, environ):
    """An elastic run on a Slurm allocation's nodes: --min-np more than its slots (its tasks,
    or --slots-per-host on each node) can never start, so it is refused now rather than
    after --elastic-timeout (--oversubscribe lets it wait); the driver starts at most the
    slots there are, whatever --max-np says."""
    try:
        alloc = allocation(environ)
    except ValueError as e:
        parser.error("inside a Slurm allocation: %s" % e)
    slots = args.slots_per_host * len(alloc.tasks_per_node) if args.slots_per_host \
        else alloc.ntasks
    if args.min_np > slots and not args.oversubscribe:
        parser.error("--min-np %d is more than the %d slots of Slurm job %s (nodes %s, tasks "
                     "per node %s): ask Slurm for more, or lower --min-np"
                     % (args.min_np, slots, alloc.job_id, alloc.nodelist,
                        environ.get("SLURM_TASKS_PER_NODE", "?")))


def _check_slurm(parser, args, environ):
    """Inside a Slurm allocation, with neither -H nor --hostfile (nor an elastic run):
    -np defaults to the allocation's tasks and may not exceed them unless --oversubscribe.
    Sets ``args.slurm`` to the :class:`mxhorovodrun.slurm.Allocation`, or None."""
    args.slurm = None
    if args.hosts or args.hostfile or getattr(args, "elastic", False):
        return  # the user's hosts, or an elastic run's (which reads the allocation itself)
    try:
        alloc = allocation(environ)
    except ValueError as e:
        parser.error("inside a Slurm allocation: %s" % e)
    if alloc is None:
        return
    args.slurm = alloc
    if args.num_proc is None:
        args.num_proc = alloc.ntasks
    refused = check_num_proc(alloc, args.num_proc, args.oversubscribe)
    if refused:
        parser.error(refused)


def _seconds_from_env(parser, environ, name):
    """The integer seconds (>= 1) that variable ``name`` of ``environ`` gives, or None when
    unset or empty; another value exits through ``parser.error`` naming it."""
    text = environ.get(name)
    if not text:
        return None
    try:
        return _positive_int(text)
    except argparse.ArgumentTypeError as e:
        parser.error("%s=%s: %s (seconds, an integer >= 1)" % (name, text, e))


def parse_args(argv=None, environ=None):
    """The parsed arguments; exits with status 2 and a usage message on bad input.
    ``environ`` (default os.environ) gives HOROVOD_START_TIMEOUT when --start-timeout is
    not on the command line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    environ = os.environ if environ is None else environ
    if args.start_timeout is None:
        args.start_timeout = _seconds_from_env(parser, environ, "HOROVOD_START_TIMEOUT")
    if args.command and args.command[0] == "--":
        # "mxhorovodrun -np 2 -- python train.py" (the habit of torchrun, srun, ...):
        # argparse keeps the "--" in front of a REMAINDER, and hydra took it for its own
        # option ("error parsing input array").
        args.command = args.command[1:]
    if args.version or args.check_build:
        return args
    if args.rank_guard is None:
        try:
            args.rank_guard = rank_guard_setting(environ)
        except ValueError as e:
            parser.error(str(e))
    if args.horovod_alias is None:
        try:
            args.horovod_alias = alias_setting(environ)
        except ValueError as e:
            parser.error(str(e))
    if args.use_gloo:
        parser.error("--gloo: mxhorovod has no Gloo controller; it runs on MPI (drop --gloo)")
    for dest, why in REFUSED.items():
        if getattr(args, dest) not in (None, False):
            parser.error(why)
    _check_elastic(parser, args, environ)
    _check_slurm(parser, args, environ)
    if args.num_proc is None:
        parser.error("-np/--num-proc is required (the number of processes)")
    if not args.command:
        parser.error("no command to run: mxhorovodrun -np %d python train.py ..." % args.num_proc)
    if args.binding_args is not None:
        try:
            words = shlex.split(args.binding_args)
        except ValueError as e:
            parser.error("--binding-args %r: %s" % (args.binding_args, e))
        if not words:
            parser.error("--binding-args is empty (e.g. --binding-args=\"-bind-to core\")")
    if args.output_filename is not None and not args.output_filename.strip():
        parser.error("--output-filename needs a directory")
    for item in args.env:
        name = item.split("=", 1)[0]
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            parser.error("-x %s: not an environment variable name (NAME or NAME=VALUE)" % item)
    return args
