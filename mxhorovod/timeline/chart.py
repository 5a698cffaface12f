"""The PNG chart of a summary: wall time per phase group, stacked, for each step."""
from mxhorovod.timeline.summary import GROUPS

__all__ = ["plot_steps"]


def plot_steps(summary, path, title="mxhorovod timeline"):
    """Writes a stacked bar chart of the wall time (ms) of each phase group per step to
    ``path`` (PNG). Uses matplotlib's non-interactive Agg backend."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = list(range(len(summary.per_step)))
    groups = [g for g in GROUPS if any(g in s for s in summary.per_step)]
    groups += sorted({g for s in summary.per_step for g in s} - set(groups))
    fig, ax = plt.subplots(figsize=(max(6.0, min(0.25 * len(steps) + 3, 24.0)), 4.5))
    bottom = [0.0] * len(steps)
    for g in groups:
        heights = [s.get(g, 0.0) / 1000.0 for s in summary.per_step]
        ax.bar(steps, heights, bottom=bottom, label=g, width=0.8)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("step (k-th use of each tensor name)")
    ax.set_ylabel("wall time, ms (rank 0)")
    ax.set_title("%s: time per phase per step" % title)
    if groups:
        ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
    return path
