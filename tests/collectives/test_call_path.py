"""What allreduce/allreduce_ hand the core for each form of call, and what they refuse
before it (the core is replaced by a recorder: no init, no MPI); where their warnings point."""
import os
import subprocess
import sys
import threading
import warnings

import mxnet as mx
import numpy as np
import pytest

import mxhorovod as hvd
from mxhorovod.collectives import submit


class Recorder:
    def __init__(self):
        self.calls = []

    def allreduce(self, *args):
        self.calls.append(args)


@pytest.fixture
def core(monkeypatch):
    rec = Recorder()
    monkeypatch.setattr(submit, "_core", rec)
    return rec


# (keyword arguments, (name, op, prescale, postscale, priority, process set id)) as the
# core receives them.
CALLS = [
    (dict(name="g"), ("g", hvd.Average, 1.0, 1.0, 0, 0)),
    (dict(name="g", op=hvd.Sum), ("g", hvd.Sum, 1.0, 1.0, 0, 0)),
    (dict(name="g", op=hvd.Product, process_set=None), ("g", hvd.Product, 1.0, 1.0, 0, 0)),
    (dict(name="g", op=True), ("g", hvd.Sum, 1.0, 1.0, 0, 0)),  # an int to Python
    (dict(name="g", op=np.int64(hvd.Max)), ("g", hvd.Max, 1.0, 1.0, 0, 0)),
    (dict(name="g", priority=-7, prescale_factor=0.25, postscale_factor=4.0),
     ("g", hvd.Average, 0.25, 4.0, -7, 0)),  # DistributedTrainer's form
    (dict(name=7, priority=True, prescale_factor=2, postscale_factor=0.5),
     ("7", hvd.Average, 2.0, 0.5, 1, 0)),
    (dict(name="g", priority=2**31 - 1, prescale_factor=-0.0),
     ("g", hvd.Average, -0.0, 1.0, 2**31 - 1, 0)),
]


@pytest.mark.parametrize("kwargs,want", CALLS, ids=lambda v: repr(v))
@pytest.mark.parametrize("fn", ["allreduce", "allreduce_"])
def test_the_core_gets_the_converted_arguments(core, kwargs, want, fn):
    x = mx.nd.ones((3,))
    out = getattr(hvd, fn)(x, **kwargs)
    (args,) = core.calls
    assert args[0] == x.handle.value
    assert args[1] == out.handle.value and (out is x) == (fn == "allreduce_")
    assert args[2:8] == want
    assert [type(a) for a in args[2:8]] == [str, int, float, float, int, int]
    assert type(args[8]) is bool


@pytest.mark.parametrize("kwargs,error,needle", [
    (dict(name="g", op=hvd.Adasum, prescale_factor=2.0), ValueError, "Adasum takes no prescale"),
    (dict(name="g", op=hvd.Adasum, postscale_factor=0.5), ValueError, "Adasum takes no prescale"),
    (dict(name="g", op=9), ValueError, "unknown reduce op"),
    (dict(name="g", op="sum"), ValueError, "unknown reduce op"),
    (dict(name="g", op=1.0), ValueError, "unknown reduce op 1.0"),
    (dict(name="g", op=[1]), ValueError, "unknown reduce op"),
    (dict(name="a\0b"), ValueError, "NUL"),
    (dict(name="\udcff"), ValueError, "not valid Unicode"),
    (dict(name="g", prescale_factor=float("nan")), ValueError, "finite"),
    (dict(name="g", postscale_factor=float("-inf")), ValueError, "finite"),
    (dict(name="g", prescale_factor="x"), ValueError, "real number"),
    (dict(name="g", priority=2**40), ValueError, "32-bit"),
    (dict(name="g", priority=-2**31 - 1), ValueError, "32-bit"),
    (dict(name="g", op=hvd.Sum, average=True), ValueError, "supersedes"),
])
def test_bad_arguments_are_refused_before_the_core(core, kwargs, error, needle):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        with pytest.raises(error, match=needle):
            hvd.allreduce_(mx.nd.ones((2,)), **kwargs)
    assert core.calls == []


def test_gradient_reduction_marks_only_its_own_thread(core):
    # settle (the last argument) is off inside gradient_reduction() and on elsewhere when
    # MXNet has MKLDNN; another thread's calls are not gradient reductions.
    x = mx.nd.ones((2,))
    seen = {}
    with submit.gradient_reduction():
        hvd.allreduce_(x, name="in")
        worker = threading.Thread(target=lambda: hvd.allreduce_(x, name="other"))
        worker.start()
        worker.join()
    hvd.allreduce_(x, name="out")
    for args in core.calls:
        seen[args[2]] = args[8]
    assert seen == {"in": False, "other": submit.MKLDNN, "out": submit.MKLDNN}


def test_a_str_subclass_name_is_sent_by_its_characters(core):
    # Its own __str__ may differ between ranks (Horovod encodes the characters).
    class Tag(str):
        def __str__(self):
            return "Tag(%s)" % str.__str__(self)

    x = mx.nd.ones((2,))
    hvd.allreduce_(x, name=Tag("grad0"))
    hvd.allreduce_(x, name=np.str_("grad1"))
    assert [c[2] for c in core.calls] == ["grad0", "grad1"]
    assert all(type(c[2]) is str for c in core.calls)


class BroadcastRecorder:
    def __init__(self):
        self.calls = []

    def broadcast(self, *args):
        self.calls.append(args)


@pytest.mark.parametrize("root", [1.0, 1.7, "1", None])
def test_root_rank_and_priority_must_be_integers(monkeypatch, root):
    # Horovod passes them through ctypes.c_int, which raises TypeError for these; a
    # truncated 1.7 would broadcast from rank 1 without a word.
    rec = BroadcastRecorder()
    monkeypatch.setattr(submit, "_core", rec)
    for fn in (hvd.broadcast, hvd.broadcast_):
        with pytest.raises(TypeError, match="'b': root_rank must be an integer"):
            fn(mx.nd.ones((2,)), root, name="b")
    with pytest.raises(TypeError, match="'p': priority must be an integer"):
        hvd.broadcast(mx.nd.ones((2,)), 0, name="p", priority=root)
    assert rec.calls == []
    hvd.broadcast(mx.nd.ones((2,)), np.int64(1), name="ok", priority=np.int32(-3))
    hvd.broadcast_(mx.nd.ones((2,)), True, name="ok_")  # bool is an int (c_int takes it)
    assert [c[2:5] for c in rec.calls] == [("ok", 1, -3), ("ok_", 1, 0)]


WARNED = r"""
import mxnet as mx
import mxhorovod as hvd
hvd.init()
x = mx.nd.ones((3,))
hvd.allreduce(x, average=True, name="a").wait_to_read()
net = mx.gluon.nn.Dense(1, in_units=1); net.initialize()
hvd.DistributedTrainer(net.collect_params(), hvd.DistributedOptimizer(mx.optimizer.SGD()))
"""


def test_warnings_name_the_scripts_line_under_default_filters(tmp_path):
    # Python shows a DeprecationWarning by default only when attributed to __main__: the
    # deprecated `average` and the unwrapped optimizer name the script's line, not ours.
    script = tmp_path / "warned.py"
    script.write_text(WARNED)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    assert "warned.py:6: DeprecationWarning: Parameter `average`" in proc.stderr, proc.stderr
    assert "warned.py:8: UserWarning: DistributedTrainer does not take a " \
        "DistributedOptimizer" in proc.stderr, proc.stderr


@pytest.mark.parametrize("kwargs", [dict(name="g"), dict(name="g", op=hvd.Sum, priority=-3),
                                    dict(name="g", op=hvd.Max, process_set=None),
                                    dict(name="g", prescale_factor=1.0, postscale_factor=1.0,
                                         process_set=hvd.global_process_set)],
                         ids=repr)
def test_the_fast_in_place_path_sends_what_the_checked_path_sends(core, kwargs):
    # allreduce_ takes a short path for the per-gradient call; allreduce_plain is the
    # checked one. Both must hand the core the same arguments.
    x = mx.nd.ones((3,))
    hvd.allreduce_(x, **kwargs)
    full = dict(average=None, name=None, priority=0, prescale_factor=1.0,
                postscale_factor=1.0, process_set=hvd.global_process_set, op=None)
    full.update(kwargs)
    submit.allreduce_plain(x, x, full["average"], full["name"], full["priority"],
                           full["prescale_factor"], full["postscale_factor"], full["op"],
                           full["process_set"], "allreduce_")
    fast, checked = core.calls
    assert fast == checked
    assert [type(a) for a in fast] == [type(a) for a in checked]
