"""Parsing a timeline file into spans: (tensor, phase, start, end, use).

The file is a Chrome trace event array as written by the core (src/common/timeline.h): per
tensor row, B/E pairs for NEGOTIATE_<OP>, the operation (<OP>) and its activities, and
instant events for the ranks found ready. A file whose writer died (no closing bracket, a
half-written last event) is read up to its last complete event, as chrome://tracing does.
"""
import json
from dataclasses import dataclass, field

__all__ = ["Span", "Timeline", "load", "parse"]

OPERATIONS = ("ALLREDUCE", "BROADCAST", "ALLGATHER", "ALLTOALL", "REDUCESCATTER", "ADD_PROCESS_SET",
              "REMOVE_PROCESS_SET")


@dataclass
class Span:
    tensor: str
    phase: str        # NEGOTIATE_ALLREDUCE, ALLREDUCE, QUEUE, MPI_ALLREDUCE, ...
    start_us: float
    end_us: float
    use: int          # 0 for the tensor's first negotiation/operation, 1 for the next, ...
    depth: int        # 0: negotiation or operation; 1: an activity inside the operation

    @property
    def duration_us(self):
        return self.end_us - self.start_us


@dataclass
class Negotiation:
    """One negotiation through the coordinator: when rank 0 received each rank's request."""
    tensor: str
    use: int
    ready_us: dict = field(default_factory=dict)   # rank -> time


@dataclass
class Timeline:
    spans: list
    negotiations: list
    errors: list          # (tensor, use, text)
    cycles: int           # CYCLE_START markers
    tensors: list         # names of the rows that hold spans or errors, in file order

    @property
    def length_us(self):
        if not self.spans:
            return 0.0
        return max(s.end_us for s in self.spans) - min(s.start_us for s in self.spans)


def _read_events(path):
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        events = json.loads(text)
    except json.JSONDecodeError:
        # An unfinished file: keep every complete event, then close the array.
        body = text.strip()
        if not body.startswith("["):
            raise ValueError("%s is not a timeline (a JSON array of trace events)" % path)
        cut = body.rfind("}")
        events = None
        while cut > 0 and events is None:
            try:
                events = json.loads(body[:cut + 1] + "]")
            except json.JSONDecodeError:
                cut = body.rfind("}", 0, cut)
        if events is None:
            raise ValueError("%s holds no complete trace event" % path)
    if isinstance(events, dict):  # the JSON object format: {"traceEvents": [...]}
        events = events.get("traceEvents", [])
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError("%s is not a timeline (a JSON array of trace events)" % path)
    return events


def parse(events):
    """Spans, negotiations and errors of a list of trace events."""
    names = {}
    order = []
    stacks = {}     # pid -> list of open (name, start, use, depth)
    uses = {}       # pid -> index of the current use (-1 before the first)
    negotiations = {}
    last_top = {}   # pid -> phase of the last closed negotiation/operation
    # pid -> the current use is an allgather's or alltoall's size exchange: the call's data
    # collective follows under the same name (mxhorovod.collectives.ops._size_exchange_name) and
    # belongs to the same use, unless the exchange failed.
    exchange = {}
    spans, errors, cycles = [], [], 0
    for e in events:
        ph, pid = e.get("ph"), e.get("pid", 0)
        if ph == "M":
            if e.get("name") == "process_name" and pid not in names:
                names[pid] = str(e.get("args", {}).get("name", pid))
                order.append(names[pid])
            continue
        if ph == "i" or ph == "I":
            if e.get("name") == "CYCLE_START":
                cycles += 1
                continue
            stack = stacks.get(pid, [])
            use = uses.get(pid, 0)
            if e.get("name") == "ERROR":
                exchange[pid] = False  # the call failed: no data collective follows
                errors.append((names.get(pid, str(pid)), use, e.get("args", {}).get("error", "")))
            elif stack and stack[-1][0].startswith("NEGOTIATE_") and "rank" in e.get("args", {}):
                neg = negotiations.setdefault((pid, use), Negotiation(names.get(pid, str(pid)), use))
                # A call's first negotiation (an allgather's size exchange: where the
                # ranks wait for each other) says which rank was late.
                neg.ready_us.setdefault(int(e["args"]["rank"]), float(e["ts"]))
            continue
        stack = stacks.setdefault(pid, [])
        if ph == "B":
            name = e.get("name", "")
            if not stack:
                # A new use starts with its negotiation, or with the operation when the
                # recording began after the negotiation (or the negotiation was not recorded).
                after_negotiation = last_top.get(pid, "").startswith("NEGOTIATE_")
                sized = name in ("NEGOTIATE_ALLGATHER", "NEGOTIATE_ALLTOALL")
                if sized and exchange.get(pid):  # the data collective of the exchange's call
                    exchange[pid] = False
                elif name.startswith("NEGOTIATE_") or not after_negotiation:
                    uses[pid] = uses.get(pid, -1) + 1
                    exchange[pid] = sized
            stack.append((name, float(e["ts"]), uses.get(pid, 0), len(stack)))
        elif ph == "E" and stack:
            name, start, use, depth = stack.pop()
            if depth == 0:
                last_top[pid] = name
            spans.append(Span(names.get(pid, str(pid)), name, start, float(e["ts"]), use,
                              min(depth, 1)))
        elif ph == "X" and "dur" in e:
            spans.append(Span(names.get(pid, str(pid)), e.get("name", ""), float(e["ts"]),
                              float(e["ts"]) + float(e["dur"]), uses.get(pid, 0), min(len(stack), 1)))
    # Negotiations through the response cache record only rank 0: not a comparison of ranks.
    negs = [n for n in negotiations.values() if len(n.ready_us) > 1]
    used = {s.tensor for s in spans} | {t for t, _, _ in errors}
    return Timeline(spans, negs, errors, cycles, [t for t in order if t in used])


def load(path):
    """Parses the timeline file at ``path``.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a JSON array of trace events.
    """
    return parse(_read_events(path))
