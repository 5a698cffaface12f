"""The overlap of the exchange with backward that the gradient order allows.

A gradient can cross the link only once every rank has it. So even an exchange that costs
no CPU and starts each gradient the moment every rank has it leaves exposed the time from
the last gradient's readiness to the end of the sends still queued then. This module
computes that time from a timeline of training steps (the start of each gradient's
ALLREDUCE slice: every rank ready, docs/timeline.md) and the link's rate, and turns it
into the largest overlap 1 - (T - C) / E any schedule could reach:
bound = 1 - exposed / E.
"""
import statistics

__all__ = ["exposed_us", "steps_exposed_us", "overlap_bound"]


def exposed_us(ready_us, nbytes, bytes_per_us):
    """Microseconds from the last gradient's readiness to the end of the exchange, when the
    link sends the gradients one after another in the order they became ready, each from
    the moment every rank had it, at ``bytes_per_us``.

    Args:
        ready_us: per gradient, when every rank had it (µs, any common origin).
        nbytes: per gradient, its size in bytes (same order).
        bytes_per_us: the link's rate for the exchange (bytes per µs), > 0.
    Raises:
        ValueError: no gradients, lengths differ, or the rate is not above 0.
    """
    if not ready_us or len(ready_us) != len(nbytes):
        raise ValueError("need one size per gradient, got %d times and %d sizes"
                         % (len(ready_us), len(nbytes)))
    if not bytes_per_us > 0:
        raise ValueError("the link's rate must be above 0, got %r" % (bytes_per_us,))
    order = sorted(zip(ready_us, nbytes))
    end = order[0][0]
    for t, b in order:
        end = max(end, t) + b / bytes_per_us
    return end - order[-1][0]


def steps_exposed_us(timeline, sizes, bytes_per_us):
    """``exposed_us`` of each step recorded in ``timeline`` (mxhorovod.timeline.load's
    result): step k is the k-th ALLREDUCE of every gradient named in ``sizes`` ({tensor
    name: bytes}); steps in which some gradient has no ALLREDUCE are left out."""
    starts = {}
    for s in timeline.spans:
        if s.depth == 0 and s.phase == "ALLREDUCE" and s.tensor in sizes:
            starts.setdefault(s.tensor, []).append(s.start_us)
    if set(starts) != set(sizes):
        return []
    steps = min(len(v) for v in starts.values())
    names = sorted(sizes)
    return [exposed_us([sorted(starts[n])[k] for n in names], [sizes[n] for n in names],
                       bytes_per_us) for k in range(steps)]


def overlap_bound(timeline, sizes, exchange_s):
    """The largest overlap the gradient order allows, 1 - exposed / E, with the link at the
    rate of the exchange alone (E = ``exchange_s`` seconds for all of ``sizes``): the
    median over the recorded steps. None when no step has every gradient."""
    e_us = exchange_s * 1e6
    steps = steps_exposed_us(timeline, sizes, sum(sizes.values()) / e_us)
    return 1 - statistics.median(steps) / e_us if steps else None
