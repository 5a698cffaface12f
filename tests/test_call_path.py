"""allreduce/allreduce_ take a shortcut for the common call (named, global set, default
priority and scale factors): it must hand the core exactly what the general checks hand it,
and let through nothing they refuse. The core is replaced by a recorder (no init needed)."""
import warnings

import mxnet as mx
import pytest

import mxhorovod as hvd
from mxhorovod import mpi_ops


class Recorder:
    def __init__(self):
        self.calls = []

    def allreduce(self, *args):
        self.calls.append(args)


@pytest.fixture
def core(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(mpi_ops, "_core", rec)
    return rec


# Keyword sets the shortcut takes (first) and forms the general path must treat alike.
SHORTCUT = [
    dict(name="g"),
    dict(name="g", op=hvd.Sum),
    dict(name="g", op=hvd.Min),
    dict(name="g", op=hvd.Max),
    dict(name="g", op=hvd.Product),
    dict(name="g", op=hvd.Average, priority=0, prescale_factor=1.0, postscale_factor=1.0),
    dict(name="g", op=True),  # bool: an int to Python, as Horovod takes it (Sum)
    dict(name="layer.0/weight:grad", op=hvd.Sum),
    dict(name="g", priority=-7, prescale_factor=0.25, postscale_factor=4.0),  # the trainer's
    dict(name="g", priority=2**31 - 1, prescale_factor=-0.0, postscale_factor=1e300),
]


@pytest.mark.parametrize("kwargs", SHORTCUT, ids=lambda k: repr(k))
@pytest.mark.parametrize("fn", ["allreduce", "allreduce_"])
def test_shortcut_hands_the_core_what_the_general_path_does(core, kwargs, fn):
    x = mx.nd.ones((3,))
    getattr(hvd, fn)(x, **kwargs)
    # The same call through the general path: process_set=None is the global set but not
    # the object the shortcut looks for.
    getattr(hvd, fn)(x, process_set=None, **kwargs)
    fast, general = core.calls
    assert fast[0] == x.handle.value and type(fast[-1]) is bool
    assert fast[3] == kwargs.get("op", hvd.Average)
    if fn == "allreduce":  # out of place: a new output array each time
        fast, general = fast[:1] + fast[2:], general[:1] + general[2:]
    assert fast == general


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(name="g", op=hvd.Adasum), ValueError, "Adasum"),
    (dict(name="g", op=9), ValueError, "unknown reduce op"),
    (dict(name="g", op="sum"), ValueError, "unknown reduce op"),
    (dict(name="a\0b"), ValueError, "NUL"),
    (dict(name="\udcff"), ValueError, "not valid Unicode"),
    (dict(name="g", prescale_factor=float("nan")), ValueError, "finite"),
    (dict(name="g", postscale_factor=float("-inf")), ValueError, "finite"),
    (dict(name="g", priority=2**40), ValueError, "32-bit"),
    (dict(name="g", priority=-2**31 - 1), ValueError, "32-bit"),
    (dict(name="g", op=hvd.Sum, average=True), ValueError, "supersedes"),
])
def test_shortcut_refuses_what_the_general_path_refuses(core, kwargs, error, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error, match=needle):
            hvd.allreduce_(mx.nd.ones((2,)), **kwargs)
    assert core.calls == []


def test_unnamed_and_converted_arguments_take_the_general_path(core):
    x = mx.nd.ones((2,))
    hvd.allreduce_(x, name=7, priority=True, prescale_factor=2, postscale_factor=0.5)
    (args,) = core.calls
    assert args[2:8] == ("7", mpi_ops.Average, 2.0, 0.5, 1, 0)
    assert type(args[4]) is float and type(args[6]) is int
