"""What a timeline says: time per phase, the tensors that took longest, per-step totals, and
which rank the negotiations waited for.

Terms: a *use* of a tensor is one negotiation and operation of its name (two for an
allgather or alltoall call: its size exchange, then its data); *step k* is the k-th use of
every name (exact when each step uses the same names, as a training loop does).
A phase's *sum* adds its spans over tensors (fused tensors share one MPI call, each counts
it); its *wall* time is the length of the union of those spans: time during which at least
one tensor was in that phase.
"""
from dataclasses import dataclass, field

from mxhorovod.timeline.events import OPERATIONS

__all__ = ["Summary", "summarize", "format_summary", "phase_group", "GROUPS"]

# Phase groups, in the order an operation goes through them.
GROUPS = ("NEGOTIATE", "QUEUE", "MEMCPY_IN_FUSION_BUFFER", "MPI", "MEMCPY_OUT_FUSION_BUFFER")


def phase_group(phase):
    """NEGOTIATE_ALLREDUCE -> NEGOTIATE, MPI_BCAST -> MPI; others unchanged."""
    if phase.startswith("NEGOTIATE_"):
        return "NEGOTIATE"
    if phase.startswith("MPI_"):
        return "MPI"
    return phase


def _union_us(intervals):
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


@dataclass
class PhaseTime:
    phase: str
    sum_us: float
    wall_us: float
    count: int


@dataclass
class TensorTime:
    tensor: str
    uses: int
    total_us: float                                   # negotiation + operation
    by_group: dict = field(default_factory=dict)      # phase group -> us


@dataclass
class RankLateness:
    rank: int
    last: int          # negotiations in which this rank was the last one ready
    mean_lag_us: float  # mean time from the first rank ready to this rank, when last


@dataclass
class Summary:
    tensors: int
    steps: int
    length_us: float
    cycles: int
    phases: list        # PhaseTime, longest sum first
    top: list           # TensorTime, longest total first
    per_step: list      # per step: {phase group: wall us}
    lateness: list      # RankLateness, most often last first
    negotiations: int   # negotiations through the coordinator (with per-rank times)
    errors: list        # (tensor, use, text)


def summarize(timeline):
    """Aggregates a parsed :class:`~mxhorovod.timeline.events.Timeline`."""
    phases = {}
    tensors = {}
    steps = {}
    for s in timeline.spans:
        top_level_op = s.depth == 0 and s.phase in OPERATIONS
        if not top_level_op:
            phases.setdefault(s.phase, []).append((s.start_us, s.end_us))
            steps.setdefault(s.use, {}).setdefault(phase_group(s.phase), []).append((s.start_us, s.end_us))
        t = tensors.setdefault(s.tensor, TensorTime(s.tensor, 0, 0.0))
        t.uses = max(t.uses, s.use + 1)
        if s.depth == 0:
            t.total_us += s.duration_us
        if not top_level_op:
            g = phase_group(s.phase)
            t.by_group[g] = t.by_group.get(g, 0.0) + s.duration_us
    phase_times = sorted((PhaseTime(p, sum(e - s for s, e in iv), _union_us(iv), len(iv))
                          for p, iv in phases.items()), key=lambda p: -p.sum_us)
    per_step = [{g: _union_us(iv) for g, iv in steps[k].items()} for k in sorted(steps)]
    last, lags = {}, {}
    for n in timeline.negotiations:
        times = n.ready_us
        latest = max(times.values())
        if latest == min(times.values()):
            continue  # everyone arrived in the same cycle: nobody was waited for
        for r, t in times.items():
            if t == latest:
                last[r] = last.get(r, 0) + 1
                lags.setdefault(r, []).append(latest - min(times.values()))
    lateness = sorted((RankLateness(r, c, sum(lags[r]) / len(lags[r])) for r, c in last.items()),
                      key=lambda x: (-x.last, x.rank))
    return Summary(len(tensors), len(per_step), timeline.length_us, timeline.cycles, phase_times,
                   sorted(tensors.values(), key=lambda t: -t.total_us), per_step, lateness,
                   len(timeline.negotiations), timeline.errors)


def _ms(us):
    return "%.3f" % (us / 1000.0)


def format_summary(summary, top=10, path=""):
    """The summary as text (what ``python -m mxhorovod.timeline summary`` prints)."""
    out = ["%s%d tensors, %d steps, %.3f s recorded%s" % (
        path + ": " if path else "", summary.tensors, summary.steps, summary.length_us / 1e6,
        ", %d cycles marked" % summary.cycles if summary.cycles else "")]
    out.append("")
    out.append("time per phase (sum over tensors; wall: while at least one tensor was in it)")
    out.append("  %-28s %12s %12s %8s" % ("phase", "sum ms", "wall ms", "spans"))
    for p in summary.phases:
        out.append("  %-28s %12s %12s %8d" % (p.phase, _ms(p.sum_us), _ms(p.wall_us), p.count))
    out.append("")
    out.append("tensors that took the most time (negotiation + operation, all steps, ms)")
    head = "  %-32s %5s %10s" % ("tensor", "uses", "total") + "".join(
        " %10s" % g.split("_FUSION")[0] for g in GROUPS)
    out.append(head)
    for t in summary.top[:top]:
        name = t.tensor if len(t.tensor) <= 32 else t.tensor[:29] + "..."
        out.append("  %-32s %5d %10s" % (name, t.uses, _ms(t.total_us)) + "".join(
            " %10s" % _ms(t.by_group.get(g, 0.0)) for g in GROUPS))
    if len(summary.top) > top:
        out.append("  ... %d more tensors" % (len(summary.top) - top))
    out.append("")
    if summary.negotiations:
        out.append("last rank ready, in %d negotiations through rank 0 (the one the others "
                   "waited for)" % summary.negotiations)
        if not summary.lateness:
            out.append("  none: every rank was ready in the same cycle")
        for r in summary.lateness:
            out.append("  rank %d: last in %d (on average %s ms after the first rank)"
                       % (r.rank, r.last, _ms(r.mean_lag_us)))
    else:
        out.append("no negotiation through rank 0 with per-rank times (all from the response "
                   "cache, or a single rank)")
    if summary.errors:
        out.append("")
        out.append("errors (%d)" % len(summary.errors))
        for tensor, use, text in summary.errors[:top]:
            out.append("  %s (use %d): %s" % (tensor, use, text))
    return "\n".join(out)
