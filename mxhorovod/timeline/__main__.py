"""python -m mxhorovod.timeline summary FILE [--top N] [--png PATH | --no-png]"""
import argparse
import os
import sys

from mxhorovod.timeline.chart import plot_steps
from mxhorovod.timeline.events import load
from mxhorovod.timeline.summary import format_summary, summarize


def _say(text):
    """print(), but a reader that went away (``... | head``) only ends the output: the
    rest of the work (the chart) is still done, without a BrokenPipeError traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Python's recipe: later writes and the flush at exit go to /dev/null.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m mxhorovod.timeline",
                                     description="Read an mxhorovod timeline file.")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("summary", help="print the phases and tensors that took the most time, "
                                       "and write a PNG chart of the time per phase per step")
    p.add_argument("file", help="timeline JSON file (HOROVOD_TIMELINE, hvd.start_timeline)")
    p.add_argument("--top", type=int, default=10, help="tensors to list (default 10)")
    p.add_argument("--png", help="chart file (default: FILE with .png instead of .json)")
    p.add_argument("--no-png", action="store_true", help="do not write the chart")
    args = parser.parse_args(argv)
    if args.top < 1:
        parser.error("--top must be at least 1")
    try:
        timeline = load(args.file)
    except (OSError, ValueError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    summary = summarize(timeline)
    _say(format_summary(summary, top=args.top, path=args.file))
    if not args.no_png:
        png = args.png or os.path.splitext(args.file)[0] + ".png"
        try:
            plot_steps(summary, png, title=os.path.basename(args.file))
        except ImportError as e:  # matplotlib: the [timeline] extra
            print("no chart: %s. Install it with: pip install 'mxhorovod[timeline]' (or "
                  "matplotlib), or pass --no-png" % e, file=sys.stderr)
            return 1
        _say("\nchart: %s (wall time per phase per step)" % png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
