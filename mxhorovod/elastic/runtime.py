"""This process's place in an elastic job: started by mxhorovodrun's elastic driver or
not, its generation (the driver's job number), the commit store, and the driver's host
service. Used by the states (commit) and by ``hvd.elastic.run``."""
import os
import time

from mxhorovod.collectives.objects import allgather_object
from mxhorovod.common.basics import local_rank, rank
from mxhorovod.common.log import get_logger
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


def persist(state):
    """Writes the state's last save to this host's commit store (local rank 0 only; under
    the elastic driver only): synchronous, so a commit that returned is on every host's
    store."""
    if not elastic():
        return
    if local_rank() == 0:
        store().write(generation(), state._commit_counter, state._snapshot())


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
    holds (ordered by generation, then counter), loads it on the lowest rank that has it,
    and returns that rank (or 0, with nothing loaded, when no host holds a commit): the
    root of the following ``state.sync``. Collective."""
    latest = store().latest() if elastic() else None
    keys = allgather_object(latest[:2] if latest else None, name="elastic.latest")
    held = [(k, r) for r, k in enumerate(keys) if k is not None]
    if not held:
        return 0, None
    best = max(k for k, _ in held)
    root = min(r for k, r in held if k == best)
    if rank() == root:
        started = time.monotonic()
        state._load_snapshot(store().read(latest[2]))
        get_logger().info("hvd.elastic: loaded commit %d (generation %d) from %s in %.3f s",
                          best[1], best[0], latest[2], time.monotonic() - started)
    return root, best
