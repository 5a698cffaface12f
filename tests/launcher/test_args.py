"""mxhorovodrun/args.py: horovodrun 0.28.1's command line (every one of its options known),
the launch flags, and bad flags refused with a message."""
import pytest

from mxhorovodrun.args import build_parser, parse_args


@pytest.mark.parametrize("argv,message", [
    (["python", "t.py"], "-np/--num-proc is required"),
    (["-np", "2"], "no command to run"),
    (["-np", "0", "python"], "must be >= 1"),
    (["-np", "-1", "python"], "-1 must be >= 1"),
    (["-np", "2", "--fusion-threshold-mb", "1e12", "python"], "'1e12' is not an integer"),
    (["-np", "2", "--fusion-threshold-mb", "-1", "python"], "must be >= 0"),
    (["-np", "2", "--cycle-time-ms", "fast", "python"], "is not a number"),
    (["-np", "2", "--log-level", "LOUD", "python"], "invalid choice"),
    (["-np", "2", "--gloo", "python"], "no Gloo controller"),
    (["-np", "2", "-H", "a:1", "--hostfile", "f", "python"], "not allowed with"),
    (["-np", "2", "-x", "1BAD=2", "python"], "not an environment variable name"),
])
def test_bad_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


NEW_FLAGS = ["--start-timeout", "--output-filename", "--prefix-output-with-timestamp", "--tcp",
             "--binding-args", "--mpi-threads-disable", "--num-nccl-streams"]


def test_launch_flags_parse():
    args = parse_args(["-np", "2", "--start-timeout", "45", "--output-filename", "logs",
                       "--prefix-output-with-timestamp", "--tcp",
                       "--binding-args=-bind-to core -map-by core", "--mpi-threads-disable",
                       "--num-nccl-streams", "3", "python", "t.py"], environ={})
    assert (args.start_timeout, args.output_filename, args.prefix_output_with_timestamp,
            args.tcp_flag, args.binding_args, args.mpi_threads_disable,
            args.num_nccl_streams) == (45, "logs", True, True, "-bind-to core -map-by core", True, 3)
    assert args.command == ["python", "t.py"]
    args = parse_args(["-np", "2", "python", "t.py"], environ={})
    assert (args.start_timeout, args.output_filename, args.prefix_output_with_timestamp,
            args.tcp_flag, args.binding_args, args.mpi_threads_disable,
            args.num_nccl_streams) == (None, None, False, False, None, None, None)
    assert parse_args(["-np", "2", "--no-mpi-threads-disable", "python"],
                      environ={}).mpi_threads_disable is False
    # horovodrun's alternative to --start-timeout; the flag wins.
    assert parse_args(["-np", "2", "python"], environ={"HOROVOD_START_TIMEOUT": "12"}).start_timeout == 12
    assert parse_args(["-np", "2", "--start-timeout", "3", "python"],
                      environ={"HOROVOD_START_TIMEOUT": "12"}).start_timeout == 3
    help_text = build_parser().format_help()
    for flag in NEW_FLAGS:
        assert flag in help_text, flag
    assert "--no-mpi-threads-disable" not in help_text


def test_double_dash_before_the_command():
    # "mxhorovodrun -np 2 -- python t.py": the "--" reached mpirun, and hydra failed with
    # "error parsing input array"; a "--" inside the command is the command's.
    assert parse_args(["-np", "2", "--", "python", "t.py", "--", "x"],
                      environ={}).command == ["python", "t.py", "--", "x"]
    assert parse_args(["-np", "2", "python", "--"], environ={}).command == ["python", "--"]
    with pytest.raises(SystemExit):
        parse_args(["-np", "2", "--"], environ={})


@pytest.mark.parametrize("argv,environ,message", [
    (["--start-timeout", "0"], {}, "must be >= 1"),
    (["--start-timeout", "-5"], {}, "must be >= 1"),
    (["--start-timeout", "1.5"], {}, "is not an integer"),
    ([], {"HOROVOD_START_TIMEOUT": "soon"}, "HOROVOD_START_TIMEOUT=soon: 'soon' is not an integer"),
    ([], {"HOROVOD_START_TIMEOUT": "0"}, "HOROVOD_START_TIMEOUT=0"),
    (["--num-nccl-streams", "0"], {}, "must be >= 1"),
    (["--num-nccl-streams", "two"], {}, "is not an integer"),
    (["--binding-args", ""], {}, "--binding-args is empty"),
    (["--binding-args", "-bind-to 'core"], {}, "No closing quotation"),
    (["--output-filename", ""], {}, "--output-filename needs a directory"),
    (["--mpi-threads-disable", "--no-mpi-threads-disable"], {}, "not allowed with"),
    (["--tcp=1"], {}, "ignored explicit argument"),
    ([], {"MXHOROVOD_RANK_GUARD": "maybe"}, "MXHOROVOD_RANK_GUARD=maybe: 1 (the default"),
    (["--rank-guard", "--no-rank-guard"], {}, "not allowed with"),
    ([], {"MXHOROVOD_HOROVOD_ALIAS": "maybe"}, "MXHOROVOD_HOROVOD_ALIAS=maybe: 1 (horovod.mxnet"),
    (["--horovod-alias", "--no-horovod-alias"], {}, "not allowed with"),
])
def test_bad_launch_flags(argv, environ, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ=environ)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_old_timestamp_flag_names():
    # horovodrun's names before 0.21.0, which horovodrun 0.28.1 still takes.
    from mxhorovodrun.settings import horovod_env
    args = parse_args(["-np", "2", "--log-hide-timestamp", "python", "t.py"], environ={})
    assert args.log_with_timestamp is False and horovod_env(args)["HOROVOD_LOG_HIDE_TIME"] == "1"
    args = parse_args(["-np", "2", "--no-log-hide-timestamp", "python", "t.py"], environ={})
    assert args.log_with_timestamp is True and horovod_env(args)["HOROVOD_LOG_HIDE_TIME"] == "0"


@pytest.mark.parametrize("argv,message", [
    (["--min-np", "1"], "--min-np: elastic training needs --host-discovery-script"),
    (["--max-np", "4"], "--max-np: elastic training needs --host-discovery-script"),
    (["--min-num-proc", "1"], "--min-np: elastic training needs"),
    (["--max-num-proc", "4"], "--max-np: elastic training needs"),
    (["--slots-per-host", "2"], "--slots-per-host: elastic training needs"),
    (["--elastic-timeout", "60"], "--elastic-timeout: elastic training needs"),
    (["--reset-limit", "3"], "--reset-limit: elastic training needs"),
    (["--blacklist-cooldown-range", "10", "100"], "--blacklist-cooldown-range: elastic training"),
    (["--host-discovery-script", "d.sh", "--min-np", "3", "--max-np", "2"],
     "--max-np 2 is less than --min-np 3"),
    (["--host-discovery-script", "d.sh", "--blacklist-cooldown-range", "9", "3"],
     "--blacklist-cooldown-range 9 3: MIN is more than MAX"),
    (["--host-discovery-script", "d.sh", "-H", "a:2"], "not allowed with argument"),
    (["--config-file", "c.yaml"], "--config-file: not supported; give the options as flags"),
    (["--jsrun"], "--jsrun: LSF's jsrun is not supported"),
    (["--thread-affinity", "-1"], "is not a comma-separated list of core ids"),
    (["--thread-affinity", "0,x"], "is not a comma-separated list of core ids"),
    (["--hierarchical-allgather", "--no-hierarchical-allgather"], "not allowed with"),
])
def test_refused_horovodrun_flags(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ={})
    assert e.value.code == 2
    assert message in capsys.readouterr().err


# Every option of horovodrun 0.28.1's parser (horovod/runner/launch.py), with its number of
# values: a horovodrun command line is never "unrecognized arguments" here.
HOROVODRUN_OPTIONS = [
    ("-v", 0), ("--version", 0), ("-np", 1), ("--num-proc", 1), ("-cb", 0),
    ("--check-build", 0), ("--disable-cache", 0), ("--start-timeout", 1),
    ("--network-interfaces", 1), ("--network-interface", 1), ("--output-filename", 1),
    ("--verbose", 0), ("--config-file", 1), ("-p", 1), ("--ssh-port", 1), ("-i", 1),
    ("--ssh-identity-file", 1), ("--fusion-threshold-mb", 1), ("--cycle-time-ms", 1),
    ("--cache-capacity", 1), ("--hierarchical-allreduce", 0),
    ("--no-hierarchical-allreduce", 0), ("--hierarchical-allgather", 0),
    ("--no-hierarchical-allgather", 0), ("--torus-allreduce", 0), ("--no-torus-allreduce",
    0), ("--autotune", 0), ("--no-autotune", 0), ("--autotune-log-file", 1),
    ("--autotune-warmup-samples", 1), ("--autotune-steps-per-sample", 1),
    ("--autotune-bayes-opt-max-samples", 1), ("--autotune-gaussian-process-noise", 1),
    ("--min-np", 1), ("--min-num-proc", 1), ("--max-np", 1), ("--max-num-proc", 1),
    ("--slots-per-host", 1), ("--elastic-timeout", 1), ("--reset-limit", 1),
    ("--blacklist-cooldown-range", 2), ("--timeline-filename", 1),
    ("--timeline-mark-cycles", 0), ("--no-timeline-mark-cycles", 0), ("--no-stall-check",
    0), ("--stall-check", 0), ("--stall-check-warning-time-seconds", 1),
    ("--stall-check-shutdown-time-seconds", 1), ("--mpi-threads-disable", 0),
    ("--no-mpi-threads-disable", 0), ("--mpi-args", 1), ("--tcp", 0), ("--binding-args", 1),
    ("--num-nccl-streams", 1), ("--thread-affinity", 1), ("--gloo-timeout-seconds", 1),
    ("--log-level", 1), ("--log-with-timestamp", 0), ("--log-without-timestamp", 0),
    ("-prefix-timestamp", 0), ("--prefix-output-with-timestamp", 0),
    ("--log-hide-timestamp", 0), ("--no-log-hide-timestamp", 0), ("-H", 1), ("--hosts", 1),
    ("-hostfile", 1), ("--hostfile", 1), ("--host-discovery-script", 1), ("--gloo", 0),
    ("--mpi", 0), ("--jsrun", 0),
]


@pytest.mark.parametrize("option,values", HOROVODRUN_OPTIONS)
def test_every_horovodrun_option_is_known(option, values, capsys):
    if option in ("-v", "--version", "-cb", "--check-build"):  # they act alone
        args = parse_args([option], environ={})
        assert args.version or args.check_build
        return
    value = {"--log-level": "INFO", "--output-filename": "logs", "--hostfile": "hosts",
             "-hostfile": "hosts", "--binding-args": "-bind-to core", "--mpi-args": "-v"}
    argv = [option] + [value.get(option, "1")] * values
    try:
        parse_args(["-np", "2"] + argv + ["python", "t.py"], environ={})
    except SystemExit:
        err = capsys.readouterr().err
        assert "unrecognized arguments" not in err and "invalid" not in err, (option, err)
