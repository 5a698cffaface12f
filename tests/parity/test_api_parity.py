"""What a horovod.mxnet 0.28 user can touch exists here with the same names, argument names
and defaults, and the build introspection answers truthfully (one process, inside pytest)."""
import inspect
import warnings

import mxnet as mx
import numpy as np
import pytest

import mxhorovod as hvd
from support.horovod_api import HOROVOD_MPI_OPS_NAMES, HOROVOD_MXNET_NAMES

# Argument names, in positional order, of horovod.mxnet 0.28.1 (printed from it with
# inspect.signature): a script calling with positional arguments must work the same.
SIGNATURES = {
    "allreduce": ["tensor", "average", "name", "priority", "prescale_factor", "postscale_factor",
                  "process_set", "op"],
    "allreduce_": ["tensor", "average", "name", "priority", "prescale_factor",
                   "postscale_factor", "process_set", "op"],
    "grouped_allreduce": ["tensors", "average", "name", "priority", "prescale_factor",
                          "postscale_factor", "process_set", "op"],
    "grouped_allreduce_": ["tensors", "average", "name", "priority", "prescale_factor",
                           "postscale_factor", "process_set", "op"],
    "broadcast": ["tensor", "root_rank", "name", "priority", "process_set"],
    "broadcast_": ["tensor", "root_rank", "name", "priority", "process_set"],
    "allgather": ["tensor", "name", "priority", "process_set"],
    "grouped_allgather": ["tensors", "name", "priority", "process_set"],
    "alltoall": ["tensor", "splits", "name", "priority", "process_set"],
    "reducescatter": ["tensor", "op", "name", "priority", "process_set", "prescale_factor",
                      "postscale_factor"],
    "grouped_reducescatter": ["tensors", "op", "name", "priority", "process_set",
                              "prescale_factor", "postscale_factor"],
    "broadcast_parameters": ["params", "root_rank", "prefix"],
    "broadcast_object": ["obj", "root_rank", "name"],
    "allgather_object": ["obj", "name"],
    "DistributedOptimizer": ["optimizer", "gradient_predivide_factor", "num_groups",
                             "process_set"],
    "DistributedTrainer": ["params", "optimizer", "optimizer_params", "compression",
                           "gradient_predivide_factor", "prefix", "num_groups", "process_set"],
}


@pytest.mark.parametrize("name", HOROVOD_MXNET_NAMES)
def test_public_name_exists(name):
    assert hasattr(hvd, name), "horovod.mxnet.%s is missing from mxhorovod" % name


@pytest.mark.parametrize("fn", sorted(SIGNATURES))
def test_argument_names(fn):
    params = inspect.signature(getattr(hvd, fn)).parameters
    for arg in SIGNATURES[fn]:
        assert arg in params, "%s() lacks the argument %r" % (fn, arg)
    # Horovod's arguments first, in Horovod's positional order (ours may follow, keyword-only
    # or defaulted).
    assert list(params)[:len(SIGNATURES[fn])] == SIGNATURES[fn], fn
    if "process_set" in params:
        assert params["process_set"].default is hvd.global_process_set


def test_init_arguments():
    # horovod.mxnet.init(*args, **kwargs) forwards to HorovodBasics.init(comm, process_sets).
    assert list(inspect.signature(hvd.init).parameters)[:2] == ["comm", "process_sets"]


def test_op_constants_follow_horovod_numbering():
    assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
    assert inspect.signature(hvd.reducescatter).parameters["op"].default == hvd.Average


def test_build_introspection_is_true_for_this_build():
    from mxhorovod import _core
    assert hvd.mpi_built() is True and hvd.mpi_enabled() is True
    assert hvd.nccl_built() == 0 and isinstance(hvd.nccl_built(), int)
    for fn in (hvd.gloo_built, hvd.gloo_enabled, hvd.ccl_built, hvd.ddl_built, hvd.cuda_built,
               hvd.rocm_built):
        assert fn() is False, fn.__name__
    hvd.init()
    try:
        assert hvd.mpi_threads_supported() == _core.mpi_threads_supported()
    finally:
        hvd.shutdown()


def test_process_set_objects_before_and_after_init():
    ps = hvd.ProcessSet([0])
    assert ps.process_set_id is None and ps.size() is None and ps.rank() is None
    assert ps.included() is None and ps.ranks == [0]
    assert str(ps) == "ProcessSet(process_set_id=None, ranks=[0], mpi_comm=None)"
    assert hvd.ProcessSet([2, 0, 1]).ranks == [0, 1, 2]
    with pytest.raises(ValueError, match="listed twice"):
        hvd.ProcessSet([1, 1])
    with pytest.raises(TypeError, match="list of ranks"):
        hvd.ProcessSet(3)
    with pytest.raises(ValueError, match="'dynamic'"):
        hvd.init(process_sets="static")
    hvd.init(process_sets=[ps])
    try:
        # Every rank of the job: that is the global set (id 0), not a second one.
        assert ps.process_set_id == 0 and ps.size() == 1 and ps.rank() == 0 and ps.included()
        assert hvd.global_process_set.ranks == [0] and hvd.global_process_set.size() == 1
        x = mx.nd.array([1.0, 2.0])
        np.testing.assert_array_equal(hvd.allreduce(x, op=hvd.Sum, process_set=ps).asnumpy(),
                                      x.asnumpy())
        # Without HOROVOD_DYNAMIC_PROCESS_SETS sets are fixed after init.
        with pytest.raises(ValueError, match="HOROVOD_DYNAMIC_PROCESS_SETS"):
            hvd.add_process_set([0])
    finally:
        hvd.shutdown()
    assert ps.size() is None


def test_deprecated_average_argument_warns_and_conflicts_with_op():
    hvd.init()
    try:
        x = mx.nd.array([2, 4], dtype="int32")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            y = hvd.allreduce(x, average=False, name="avg.false")
        assert any(issubclass(i.category, DeprecationWarning) and "op" in str(i.message) for i in w)
        np.testing.assert_array_equal(y.asnumpy(), [2, 4])
        with pytest.raises(ValueError, match="supersedes average"):
            hvd.allreduce(x, average=True, op=hvd.Sum)
        with pytest.raises(ValueError, match="Adasum takes float16, float32 or float64"):
            hvd.allreduce(x, op=hvd.Adasum)  # x is int32
    finally:
        hvd.shutdown()


def test_reducescatter_one_process_and_bad_input():
    hvd.init()
    try:
        x = mx.nd.arange(6).reshape((3, 2))
        np.testing.assert_array_equal(hvd.reducescatter(x).asnumpy(), x.asnumpy())
        a, b = hvd.grouped_reducescatter([x, x * 2], op=hvd.Sum, postscale_factor=0.5)
        np.testing.assert_array_equal(b.asnumpy(), x.asnumpy())
        with pytest.raises(ValueError, match="only hvd.Sum and hvd.Average"):
            hvd.reducescatter(x, op=hvd.Min)
        for bad in (1.0, [1], "Sum"):  # never handed to the core (a pybind TypeError there)
            with pytest.raises(ValueError, match="unknown reduce op"):
                hvd.reducescatter(x, op=bad)
        np.testing.assert_array_equal(hvd.reducescatter(x, op=np.int32(hvd.Sum)).asnumpy(),
                                      x.asnumpy())
        assert hvd.grouped_reducescatter([]) == []  # empty groups: no-ops, as in Horovod
        with pytest.raises(TypeError, match="NDArray"):
            hvd.reducescatter(np.ones(3))
        g = hvd.grouped_allgather([x, x[1:].copy()])
        assert [o.asnumpy().shape for o in g] == [(3, 2), (2, 2)]
    finally:
        hvd.shutdown()


def test_horovod_call_forms():
    """Calls a Horovod script makes that once failed here: empty groups, name='', alltoall
    splits as a list or int64 numpy array, positional process_set, imports from mpi_ops."""
    hvd.init()
    try:
        assert hvd.grouped_allreduce([]) == []
        empty = []
        assert hvd.grouped_allreduce_(empty) is empty
        assert hvd.grouped_allgather([]) == []
        with pytest.raises(ValueError, match="list of NDArrays"):
            hvd.grouped_allreduce(mx.nd.ones(2))
        x = mx.nd.arange(4)
        np.testing.assert_array_equal(hvd.allreduce(x, name="").asnumpy(), x.asnumpy())
        np.testing.assert_array_equal(hvd.allreduce(x, None, "pos", 0, 2.0, 1.0,
                                                    hvd.global_process_set, hvd.Sum).asnumpy(),
                                      2 * x.asnumpy())
        for splits in ([4], np.array([4]), mx.nd.array([4], dtype="int64")):
            out, recv = hvd.alltoall(x, splits=splits)
            np.testing.assert_array_equal(out.asnumpy(), x.asnumpy())
            assert recv.dtype == np.int32 and recv.asnumpy().tolist() == [4]
        with pytest.raises(ValueError, match="integers"):
            hvd.alltoall(x, splits=[4.0])
        from mxhorovod.mpi_ops import (ProcessSet, add_process_set, init, local_rank, rank,
                                       remove_process_set, shutdown, size)
        assert init is hvd.init and shutdown is hvd.shutdown and rank() == 0 and size() == 1
        assert local_rank() == 0 and ProcessSet is hvd.ProcessSet
        assert add_process_set is hvd.add_process_set
        assert remove_process_set is hvd.remove_process_set
    finally:
        hvd.shutdown()


def test_mpi_ops_exports_what_horovods_does():
    import mxhorovod.mpi_ops as ours
    for name in HOROVOD_MPI_OPS_NAMES:
        assert hasattr(ours, name), "horovod.mxnet.mpi_ops.%s is missing" % name
