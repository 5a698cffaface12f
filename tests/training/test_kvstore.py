"""kvstore 'horovod' (mx.kv.create('horovod') and gluon.Trainer(kvstore='horovod')):
values on every rank under mpirun (tests/training/workers/kvstore_*.py), registration in-process."""
import mxnet as mx
import pytest

import mxhorovod  # noqa: F401  registers the kvstore
from mxhorovod.training.kvstore import Horovod
from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("np_", [2, 3])
def test_pushpull_and_broadcast_values_and_errors(np_):
    # int/str/numpy keys, lists of keys, several devices, out given or not, int and float
    # dtypes, two kvstores at once, bad input, ranks that disagree, a peer that ended.
    run_ranks(np_, "kvstore_ops.py", timeout=180)


@pytest.mark.parametrize("np_", [2, 3])
def test_unchanged_trainer_equals_one_process(np_):
    # kvstore instance and string, one and two devices per rank, SGD+momentum and Adam,
    # step(global batch) == one process; step(per-rank batch) == lr x size; the first
    # step's broadcast; allreduce_grads() sums; ignore_stale_grad with a branch used on
    # some ranks only; update_on_kvstore, sparse, Module refused.
    run_ranks(np_, "kvstore_training.py", timeout=300)


def test_registered_under_its_name():
    assert mx.kvstore.KVStoreBase.kv_registry["horovod"] is Horovod
    assert Horovod.is_capable("optimizer") is False


def test_string_alias_only_for_horovod():
    import mxnet.gluon.trainer
    import mxnet.model
    import mxnet.module.module
    from mxhorovod.training.patches import install_kvstore_alias
    patched = mxnet.model._create_kvstore
    install_kvstore_alias()  # a second install changes nothing
    assert mxnet.model._create_kvstore is patched
    assert mxnet.gluon.trainer._create_kvstore is patched
    assert mxnet.module.module._create_kvstore is patched
    # Other names behave as in MXNet: one device and no 'dist' means no kvstore.
    assert patched("local", 1, {}) == (None, False)
    assert patched(None, 1, {}) == (None, False)
