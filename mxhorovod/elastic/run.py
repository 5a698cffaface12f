"""``hvd.elastic.run``: the training function's wrapper (Horovod's ``run_fn``).

A reset ends this job's processes and the elastic driver starts new ones (an MPI world
cannot shrink or grow), so the wrapper does at each start what Horovod's does after a reset:

1. loads the newest commit any host holds on a rank that has it and syncs it to every rank
   (with no commit anywhere, rank 0's state);
2. in every job after the first, and after loading a durable commit, calls the state's
   reset callbacks;
3. calls the function; then, when it raises:

   - ``HostsUpdatedInterrupt`` (every rank, at the same commit): the ranks shut down and
     exit with code 75; the driver starts the next job on the new hosts;
   - ``HorovodInternalError``, or a collective's error naming a lost peer: the rank prints
     ``mxhorovod elastic: peer lost: rank R (host H): ...`` and exits at once with code
     76; the driver leaves the host out and starts again;
   - anything else: raised as usual, and the job ends (no retry).

Under the driver, a SIGTERM to the rank (a preemption notice or a drain, sent to every
process of the host) does not end it: the rank guard tells the driver that this host is
leaving, and the job stops at the next ``commit()`` or ``check_host_updates()`` of every
rank, as for any host change (exit 75). A SIGKILL after the grace time finds it gone.

Under plain ``mpirun`` (or ``srun``) the function runs once, as a fixed-size job (one
warning), from the newest durable commit when ``MXHOROVOD_ELASTIC_DURABLE_DIR`` names a
folder that holds one (durable.py).
"""
import functools
import os
import re
import signal
import sys
import threading
import time

from mxhorovod.elastic import durable, runtime
from mxhorovod.elastic.state import HorovodInternalError, HostsUpdatedInterrupt
from mxhorovod.common import basics, failures
from mxhorovod.common.log import get_logger
from mxhorovodrun.elastic_protocol import (EXIT_HOSTS_UPDATED, EXIT_PEER_LOST,
                                                PEER_LOST_MARKER)

__all__ = ["run", "is_peer_loss"]

# Errors of a collective that mean a peer or host was lost, not a bug of the script. The
# transfer bound between hosts (MXHOROVOD_*_TIMEOUT of the cluster issue) names the peer
# host in its error: "... host 'h2' ...".
PEER_LOSS_PATTERNS = [
    re.compile(r"(?:peer|host)\b.*\b(?:lost|unreachable|timed out|did not answer|no answer|"
               r"connection (?:reset|refused|closed))", re.IGNORECASE),
]
_HOST_IN_TEXT = re.compile(r"host '?([\w.-]+)'?")


def is_peer_loss(error):
    """Whether ``error`` (an exception) says that a peer or host was lost."""
    if isinstance(error, HorovodInternalError):
        return True
    text = str(error)
    return any(p.search(text) for p in PEER_LOSS_PATTERNS)


def _peer_lost(error):
    m = _HOST_IN_TEXT.search(str(error))
    line = "%s: rank %d (host %s): %s" % (PEER_LOST_MARKER, basics.rank(), m.group(1) if m else "?",
                                          str(error).replace("\n", " ")[:500])
    try:
        sys.stdout.flush()
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    finally:
        # No MPI_Finalize: it would wait for the lost peer. The launcher ends the others.
        os._exit(EXIT_PEER_LOST)


def _hosts_updated():
    get_logger().info("hvd.elastic: hosts changed; this job ends at this commit and the "
                      "driver starts the next one")
    basics.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    sys.exit(EXIT_HOSTS_UPDATED)


def _sigterm_is_a_notice(wait=3.0):
    """Under the driver, from the main thread: a SIGTERM that the rank guard took as this
    host's notice (to every process of a host being preempted or drained) is noted, not
    fatal: the guard told the driver, which stops the job at the next commit or check (see
    the module). The guard's word comes within ``wait`` seconds (it asks the driver);
    without it (the run is being stopped, no guard, no driver), the rank dies of the
    SIGTERM as before."""
    if threading.current_thread() is not threading.main_thread():
        return

    def on_sigterm(sig, frame):
        end = time.monotonic() + (wait if os.environ.get("MXHOROVOD_GUARD_FD") else 0)
        word = failures.guard_word()
        while word not in (b"L", b"S") and time.monotonic() < end:
            time.sleep(0.01)  # the guard got the same SIGTERM and is asking the driver
            word = failures.guard_word()
        if word != b"L":
            signal.signal(sig, signal.SIG_DFL)
            os.kill(os.getpid(), sig)
            return
        runtime.warn_once("sigterm", "hvd.elastic: rank %d got SIGTERM: this host is leaving; "
                          "the job stops at the next commit or check_host_updates() and goes "
                          "on without it", basics.rank())
    signal.signal(signal.SIGTERM, on_sigterm)


def run(func):
    """Decorator of the training function ``func(state, *args, **kwargs)`` (``state``: an
    ``hvd.elastic.State``). Returns the function's result. See the module for what
    happens at each start and on each error.

    Raises:
        whatever ``func`` raises, but for the elastic cases above (which end the process
        under the driver).
    """
    @functools.wraps(func)
    def wrapper(state, *args, **kwargs):
        if not basics.is_initialized():
            raise RuntimeError("hvd.elastic.run: call hvd.init() before the training function")
        if not runtime.elastic():
            if basics.rank() == 0:
                runtime.warn_once("plain", "hvd.elastic.run: not started by mxhorovodrun's "
                                  "elastic mode (--host-discovery-script, or --min-np in a "
                                  "Slurm allocation); running as a fixed-size job of %d "
                                  "ranks, with no reset", basics.size())
            root, _, resumed = runtime.load_best(state) if durable.folder() else (0, None, False)
            state.sync(root)
            if resumed:
                state.on_reset()  # the ranks may be other ones than the commit's
            result = func(state, *args, **kwargs)
            durable.remove()
            return result
        _sigterm_is_a_notice()
        try:
            root, best, resumed = runtime.load_best(state)
            state.sync(root)
            if best is not None:  # a host new to the job gets a copy too
                runtime.persist(state, durable_copy=False)
            if runtime.generation() > 0 or resumed:
                state.on_reset()
            result = func(state, *args, **kwargs)
        except HostsUpdatedInterrupt:
            _hosts_updated()
        except Exception as e:  # noqa: BLE001 - sorted below
            if is_peer_loss(e):
                _peer_lost(e)
            raise
        if basics.local_rank() == 0:
            runtime.store().remove()  # done: this host's commits of the job go
        durable.remove()
        return result
    return wrapper
