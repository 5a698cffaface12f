"""Single-process behaviour (size 1) and the pure planners, run inside pytest."""
import mxnet as mx
import numpy as np
import pytest

import mxhorovod as hvd
from mxhorovod import _core


def test_before_init_raises():
    if hvd.is_initialized():
        hvd.shutdown()
    with pytest.raises(ValueError, match="not been initialized"):
        hvd.rank()
    with pytest.raises(ValueError, match="not initialized"):
        hvd.allreduce(mx.nd.ones(2), name="before")


def test_single_process_collectives():
    hvd.init()
    try:
        assert (hvd.rank(), hvd.size(), hvd.local_rank(), hvd.local_size()) == (0, 1, 0, 1)
        x = mx.nd.array([[1, 2, 3]], dtype="float32")
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum).asnumpy(), x.asnumpy())
        np.testing.assert_array_equal(hvd.allreduce(x).asnumpy(), x.asnumpy())
        np.testing.assert_array_equal(hvd.broadcast(x, 0).asnumpy(), x.asnumpy())
        np.testing.assert_array_equal(hvd.allgather(x).asnumpy(), x.asnumpy())
        np.testing.assert_array_equal(hvd.alltoall(x).asnumpy(), x.asnumpy())
        y = hvd.allreduce(x * 2, op=hvd.Sum, prescale_factor=0.5, postscale_factor=3)
        np.testing.assert_allclose(y.asnumpy(), x.asnumpy() * 3)
        assert hvd.mpi_built() and hvd.mpi_enabled() and hvd.nccl_built() == 0
        assert not hvd.gloo_built() and not hvd.cuda_built()
    finally:
        hvd.shutdown()


def test_a_collective_in_a_hybridized_block_says_why():
    # Was "allreduce expects an mxnet NDArray, got Symbol", nothing about hybridize().
    class Centred(mx.gluon.HybridBlock):
        def hybrid_forward(self, F, x):
            return x - hvd.allreduce(x.mean(axis=0, keepdims=True))

    hvd.init()
    try:
        net = Centred()
        x = mx.nd.array([[1.0, 2.0], [3.0, 4.0]])
        np.testing.assert_allclose(net(x).asnumpy(), [[-1, -1], [1, 1]])
        net.hybridize()
        with pytest.raises(TypeError, match="cannot be part of a hybridized graph"):
            net(x)
    finally:
        hvd.shutdown()


def test_a_0d_array_from_a_python_number_says_what_to_pass():
    # mx.nd.array(acc) of a Python float (a metric) is shape (): MXNet's legacy shape mode
    # takes that for an unknown shape. Was "the NDArray has no shape (uninitialized)".
    hvd.init()
    try:
        x = mx.nd.array(0.5)
        for call in (lambda: hvd.allreduce(x, name="acc"), lambda: hvd.allreduce_(x, name="acc_"),
                     lambda: hvd.broadcast(x, 0, name="acc_b"),
                     lambda: hvd.grouped_allreduce([x], name="acc_g")):
            with pytest.raises(hvd.InvalidArgumentError,
                               match=r"shape \(\).*mx\.nd\.array\(\[value\]\)"):
                call()
        np.testing.assert_array_equal(hvd.allreduce(mx.nd.array([0.5]), name="acc").asnumpy(), [0.5])
    finally:
        hvd.shutdown()


def _thread_names():
    import os
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                names.append(f.read().strip())
        except OSError:  # the thread ended meanwhile
            pass
    return names


def test_background_thread_is_named():
    """top -H, ps -L and perf tell our communication thread from the model's threads."""
    hvd.init()
    try:
        assert _thread_names().count("mxhorovod-bg") == 1
    finally:
        hvd.shutdown()
    assert "mxhorovod-bg" not in _thread_names()


def test_timeline_writer_is_named_apart(tmp_path):
    """The timeline's writer thread, started by the background thread, does not inherit its
    name: 'mxhorovod-bg' stays the communication alone."""
    hvd.init()
    try:
        hvd.start_timeline(str(tmp_path / "timeline.json"))
        hvd.allreduce(mx.nd.ones((4,)), name="named.threads").wait_to_read()
        names = _thread_names()
        assert names.count("mxhorovod-bg") == 1 and names.count("mxhorovod-tl") == 1, names
        hvd.stop_timeline()
    finally:
        hvd.shutdown()


def test_init_twice_and_after_shutdown():
    hvd.init()
    hvd.init()  # no-op while running
    assert hvd.is_initialized()
    hvd.shutdown()
    hvd.shutdown()  # idempotent
    assert not hvd.is_initialized()
    hvd.init()
    assert hvd.allreduce(mx.nd.ones(3), op=hvd.Sum).asnumpy().tolist() == [1, 1, 1]
    hvd.shutdown()


def test_init_with_rank_list_and_mpi4py_comm():
    pytest.importorskip("mpi4py")  # optional: the [mpi4py] extra (tests/test_install.py)
    from mpi4py import MPI
    hvd.init(comm=[0])
    assert hvd.size() == 1
    hvd.shutdown()
    hvd.init(comm=MPI.COMM_WORLD)
    assert hvd.size() == MPI.COMM_WORLD.Get_size()
    # mpi4py keeps working beside us.
    assert MPI.COMM_WORLD.allreduce(3) == 3
    hvd.shutdown()
    with pytest.raises(ValueError, match="takes None"):
        hvd.init(comm="world")


def test_bad_environment_variable_is_reported():
    import os
    os.environ["HOROVOD_FUSION_THRESHOLD"] = "lots"
    try:
        with pytest.raises(ValueError, match="HOROVOD_FUSION_THRESHOLD='lots'"):
            hvd.init()
    finally:
        del os.environ["HOROVOD_FUSION_THRESHOLD"]


def test_plan_fusion_groups_by_key_within_threshold():
    f32, f16 = 0, 2
    items = [(True, f32, 1, 1.0, 1.0, 40), (True, f16, 1, 1.0, 1.0, 40),
             (True, f32, 1, 1.0, 1.0, 40), (True, f32, 1, 1.0, 1.0, 40),
             (True, f32, 0, 1.0, 1.0, 10), (False, f32, 1, 1.0, 1.0, 5),
             (True, f32, 1, 1.0, 1.0, 500), (True, f32, 1, 2.0, 1.0, 10)]
    groups = _core.plan_fusion(items, 100)
    # Two f32 Sum items fit (80 <= 100); the third opens a new group; other keys, the
    # non-fusable item and the item above the threshold each go alone.
    assert groups == [[0, 2], [1], [3], [4], [5], [6], [7]]
    assert _core.plan_fusion(items, 0) == [[i] for i in range(len(items))]
    assert sorted(i for g in _core.plan_fusion(items, 10**9) for i in g) == list(range(len(items)))


@pytest.mark.parametrize("var,value,needle", [
    ("HOROVOD_CACHE_CAPACITY", "1e12", "limit"),
    ("HOROVOD_CYCLE_TIME", "1e9", "minute"),
    ("HOROVOD_CYCLE_TIME", "nan", "not a non-negative number"),
    ("HOROVOD_CYCLE_TIME", "inf", "not a non-negative number"),
    ("HOROVOD_FUSION_THRESHOLD", "1e30", "HOROVOD_FUSION_THRESHOLD='1e30' is above the largest"),
    ("MXHOROVOD_BLOCKING_DATA", "0.5", "not a boolean"),
    ("MXHOROVOD_BLOCKING_DATA", "garbage", "not a boolean"),
    ("MXHOROVOD_CMA", "maybe", "MXHOROVOD_CMA='maybe' is not a boolean"),
    ("MXHOROVOD_CMA_MIN_BYTES", "-5", "MXHOROVOD_CMA_MIN_BYTES='-5' is not a non-negative number"),
    ("MXHOROVOD_CMA_MIN_BYTES", "abc", "not a non-negative number"),
    ("MXHOROVOD_SIMD", "avx9", "MXHOROVOD_SIMD='avx9' is not one of auto, avx2, portable"),
])
def test_out_of_range_environment_values_are_refused(var, value, needle):
    import os
    os.environ[var] = value
    try:
        with pytest.raises(ValueError, match=needle):
            hvd.init()
    finally:
        del os.environ[var]
    assert not hvd.is_initialized()


def test_c_entry_points_are_exported_and_callable():
    """The C API of include/mxhorovod/c_api.h is callable by name from the built module
    (pybind11 hides every other symbol)."""
    import ctypes
    hvd.init()
    try:
        lib = ctypes.CDLL(_core.__file__)
        lib.MXHorovodGetLastError.restype = ctypes.c_char_p
        x = mx.nd.array([1.0, 2.0, 3.0])
        out = mx.nd.zeros(3)
        rc = lib.MXWaitforHorovodAllreduce(x.handle, out.handle, b"capi.x", 1,
                                           ctypes.c_double(2.0), ctypes.c_double(1.0), 0, 0)
        assert rc == 0, lib.MXHorovodGetLastError()
        np.testing.assert_allclose(out.asnumpy(), [2.0, 4.0, 6.0])  # Sum of one rank, x2
        rc = lib.MXWaitforHorovodBroadcast(x.handle, out.handle, b"capi.b", 0, 0, 0)
        assert rc == 0, lib.MXHorovodGetLastError()
        np.testing.assert_allclose(out.asnumpy(), [1.0, 2.0, 3.0])
        rc = lib.MXWaitforHorovodAllreduce(x.handle, out.handle, None, 1,
                                           ctypes.c_double(1.0), ctypes.c_double(1.0), 0, 0)
        assert rc == -1
        assert b"empty name" in lib.MXHorovodGetLastError()
        # Null arrays are refused with their name, never dereferenced.
        handles = (ctypes.c_void_p * 1)(x.handle.value)
        outs = (ctypes.c_void_p * 1)(out.handle.value)
        names = (ctypes.c_char_p * 1)(b"capi.g")
        for ins, os_, ns, what in ((None, outs, names, b"inputs"), (handles, None, names, b"outputs"),
                                   (handles, outs, None, b"names")):
            rc = lib.MXWaitforHorovodGroupedAllreduce(ins, os_, 1, ns, 1, ctypes.c_double(1.0),
                                                      ctypes.c_double(1.0), 0, 0)
            assert rc == -1
            assert b"grouped allreduce" not in lib.MXHorovodGetLastError()  # a group of one
            assert b"the " + what + b" array is null" in lib.MXHorovodGetLastError()
            rc = lib.MXWaitforHorovodGroupedAllgather(ins, os_, 1, ns, 0, 0)
            assert rc == -1 and what in lib.MXHorovodGetLastError()
        splits = (ctypes.c_int64 * 1)(3)
        for sp, rs, what in ((None, splits, b"the splits array"), (splits, None, b"recv_splits")):
            rc = lib.MXWaitforHorovodAlltoall(x.handle, out.handle, b"capi.a", sp, rs, 1, 0, 0)
            assert rc == -1 and what in lib.MXHorovodGetLastError()
        two = (ctypes.c_int64 * 2)(3, 0)
        rc = lib.MXWaitforHorovodAlltoall(x.handle, out.handle, b"capi.a", two, two, 2, 0, 0)
        assert rc == -1 and b": 2 splits given for 1 rank" in lib.MXHorovodGetLastError()
        with pytest.raises(ValueError, match="splits has 2 entries for 1 rank$"):
            hvd.alltoall(x, splits=[3, 0])
        rc = lib.MXWaitforHorovodGroupedAllreduce(handles, outs, 1, names, 1, ctypes.c_double(1.0),
                                                  ctypes.c_double(1.0), 0, 0)
        assert rc == 0, lib.MXHorovodGetLastError()
        np.testing.assert_allclose(out.asnumpy(), [1.0, 2.0, 3.0])
    finally:
        hvd.shutdown()


def test_the_raw_allreduce_binding_refuses_bad_arguments():
    # _core.allreduce is a METH_FASTCALL function (python/fast_call.cc), not pybind11's: its
    # own conversions must raise, never crash or pass a wrong value on.
    hvd.init()
    try:
        x = mx.nd.ones((3,))
        h = x.handle.value
        good = [h, h, "raw.ok", hvd.Sum, 1.0, 1.0, 0, 0, False]
        _core.allreduce(*good)
        np.testing.assert_array_equal(x.asnumpy(), [1, 1, 1])
        with pytest.raises(TypeError, match="takes 9 arguments"):
            _core.allreduce(*good[:8])
        bad = [(2, b"raw.bytes", TypeError), (2, None, TypeError), (3, "1", TypeError),
               (4, "x", TypeError), (6, 2**31, OverflowError), (7, 1.5, TypeError),
               (0, "handle", TypeError)]
        for i, value, error in bad:
            args = list(good)
            args[i] = value
            with pytest.raises(error):
                _core.allreduce(*args)
        # A refused call (unknown op) raises InvalidArgumentError, as through pybind11.
        args = list(good)
        args[2], args[3] = "raw.badop", 99
        with pytest.raises(hvd.InvalidArgumentError, match="unknown reduce op 99"):
            _core.allreduce(*args)
        x.wait_to_read()
    finally:
        hvd.shutdown()


def test_loop_stats_count_the_background_threads_work():
    hvd.init()
    try:
        before = _core.loop_stats()
        arrays = [mx.nd.ones((4,)) for _ in range(20)]
        for i, a in enumerate(arrays):
            hvd.allreduce_(a, op=hvd.Sum, name="stats.%d" % i)
        mx.nd.waitall()
        after = _core.loop_stats()
        assert after["tensors"] - before["tensors"] == 20
        assert after["cycles"] > before["cycles"]
        assert 1 <= after["groups"] - before["groups"] <= 20
        for stage in ("negotiate_ns", "plan_ns", "execute_ns", "complete_ns"):
            assert after[stage] > before[stage], stage
    finally:
        hvd.shutdown()
