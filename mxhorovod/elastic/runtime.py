"""This process's place in an elastic job: started by mxhorovodrun's elastic driver or
not, its generation (the driver's job number), the commit store, and the driver's host
service. Used by the states (commit) and by ``hvd.elastic.run``."""
import os
import time

from mxhorovod.collectives.objects import allgather_object
from mxhorovod.common.basics import local_rank, rank
from mxhorovod.common.log import get_logger
from mxhorovod.elastic import durable
from mxhorovod.elastic.store import CommitStore
from mxhorovodrun.elastic_protocol import (ENV_DRIVER, ENV_ELASTIC, ENV_GENERATION,
                                           ENV_HOSTS_VERSION, ENV_SECRET, ask_hosts_version)

_state = {"store": None, "warned": set(), "last_ask": 0.0, "answer": None}


def elastic():
    """Whether the elastic driver started this process (MXHOROVOD_ELASTIC=1)."""
    return os.environ.get(ENV_ELASTIC, "") == "1"


def generation():
    """The driver's job number: 0 for the first job, then +1 at every reset."""
    text = os.environ.get(ENV_GENERATION, "0")
    return int(text) if text.isdigit() else 0


def store():
    if _state["store"] is None:
        _state["store"] = CommitStore()
    return _state["store"]


def warn_once(key, text, *args):
    if key not in _state["warned"]:
        _state["warned"].add(key)
        get_logger().warning(text, *args)


def persist(state, durable_copy=True):
    """Writes the state's last save to this host's commit store (local rank 0 only; under
    the elastic driver only), and with ``durable_copy`` to the durable folder when one is
    named (durable.py; collective then): synchronous, so a commit that returned is on
    every host's store and on disk."""
    if elastic() and local_rank() == 0:
        store().write(generation(), state._commit_counter, state._snapshot())
    if durable_copy:
        durable.write(state, state._bcast_object)


def hosts_updated():
    """Rank 0: None, or 'added'/'removed' when the driver's host set differs from the one
    this job started on. A driver that does not answer (within 5 s), or no secret to ask
    it with (MXHOROVOD_ELASTIC_SECRET), counts as no change, with one warning."""
    address = os.environ.get(ENV_DRIVER, "")
    mine = os.environ.get(ENV_HOSTS_VERSION, "")
    if not address or not mine.isdigit():
        return None
    secret = os.environ.get(ENV_SECRET, "")
    if not secret:
        warn_once("driver", "hvd.elastic: %s is not set: the driver at %s is not asked, and "
                  "host changes are not seen", ENV_SECRET, address)
        return None
    try:
        current = ask_hosts_version(address, secret)
    except (OSError, ValueError) as e:
        warn_once("driver", "hvd.elastic: the driver at %s did not answer (%s); host changes "
                  "are not seen until it does", address, e)
        return None
    return "added" if current != int(mine) else None


def load_best(state):
    """At the start of the training function: finds the newest commit that any rank's host
    holds (ordered by generation, then counter; under the elastic driver), else the newest
    in the durable folder (durable.py), loads it on the lowest rank that has it, and
    returns (that rank, its key, whether it came from the durable folder): the rank is the
    root of the following ``state.sync``; (0, None, False), with nothing loaded, when there
    is no commit. Collective."""
    latest = store().latest() if elastic() else None
    root, best = _load_newest(state, latest, lambda path: store().read(path),
                              "elastic.latest", "generation")
    if best is None and durable.folder() is not None:
        # Nothing of this run on any host: a new run (a requeued job), or no driver.
        root, best = _load_newest(state, durable.latest(), durable.read, "elastic.durable",
                                  "durable")
        return root, best, best is not None
    return root, best, False


def _load_newest(state, latest, read, name, label):
    """Loads the newest of the ranks' ``latest`` ((generation, counter, path) or None) by
    ``read(path)`` on the lowest rank that has it: (root, key), or (0, None) when no rank
    has one. Collective."""
    keys = allgather_object(latest[:2] if latest else None, name=name)
    held = [(k, r) for r, k in enumerate(keys) if k is not None]
    if not held:
        return 0, None
    best = max(k for k, _ in held)
    root = min(r for k, r in held if k == best)
    error = None
    if rank() == root:
        started = time.monotonic()
        try:
            state._load_snapshot(read(latest[2]))
        except Exception as e:  # noqa: BLE001 - every rank raises it, below
            error = "%s: %s" % (type(e).__name__, e)
        else:
            get_logger().info("hvd.elastic: loaded commit %d (%s %d.%d) from %s in %.3f s",
                              state._commit_counter, label, best[0], best[1], latest[2],
                              time.monotonic() - started)
    # Every rank learns whether the root could load it: a damaged file, or a commit of
    # another model, must not leave the other ranks with a bare "peer shut down".
    error = state._bcast_object((error, latest[2] if latest else None), root_rank=root)
    if error[0]:
        where = " (%s=%s)" % (durable.ENV_DURABLE_DIR, durable.folder()) \
            if label == "durable" else ""
        raise ValueError("hvd.elastic: rank %d could not load the commit %s%s: %s. Remove it "
                         "to start afresh, or point the variable at this model's commits"
                         % (root, error[1], where, error[0]))
    return root, best
