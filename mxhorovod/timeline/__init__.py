"""Reading mxhorovod timeline files.

Record one with ``HOROVOD_TIMELINE=path`` or :func:`mxhorovod.start_timeline`; summarize
it with::

    python -m mxhorovod.timeline summary timeline.json [--top 10] [--png chart.png]

which prints the phases and tensors that took the most time and which rank was last to be
ready, and writes a PNG chart of the time per phase per step. See docs/timeline.md.
"""
from mxhorovod.timeline.events import Span, Timeline, load
from mxhorovod.timeline.summary import Summary, summarize

__all__ = ["Span", "Timeline", "load", "Summary", "summarize"]
