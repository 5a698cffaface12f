"""Ranks stay bit-identical (issue 48 item 5): NAG after evaluation passes gives the same
bits on every rank with DistributedTrainer, a DistributedOptimizer and kvstore 'horovod'
(weights settled into the plain layout before the update); with the settling switched off
the same scenario drifts on every path, every run (the test would catch a regression).
The worker, tests/training/workers/bit_identical.py, asserts on every rank."""
import pytest

from mxhorovod_devtools.mpirun import run_ranks


@pytest.mark.parametrize("mode", ["settled", "unsettled"])
def test_nag_after_evaluation(mode):
    run_ranks(2, "bit_identical.py", args=[mode], timeout=120)


def test_settles_only_after_an_inference_forward(monkeypatch):
    # One process: a Settler settles at its first update, then only after a Gluon forward
    # outside training mode (or an executor's inference forward), never after training.
    import mxnet as mx
    from mxnet import gluon

    import mxhorovod  # noqa: F401 - installs the inference counter
    from mxhorovod.training import update_layout

    settled = []
    monkeypatch.setattr(update_layout, "settle_weights", lambda ws: settled.append(len(ws)))
    net = gluon.nn.Conv2D(4, 3, in_channels=2)
    net.initialize()
    x = mx.nd.ones((1, 2, 5, 5))
    settler = update_layout.Settler()

    def train_step():
        with mx.autograd.record():
            net(x).sum().backward()
        settler.settle([0], lambda keys: [net.weight.list_data()])  # list_data: not counted

    train_step()
    train_step()
    assert settled == [1]  # the first update only
    with mx.autograd.predict_mode():
        net(x)
    train_step()
    train_step()
    assert settled == [1, 1]
    net(x)  # outside record(): inference mode too
    train_step()
    exe = (mx.sym.Variable("a") * 2).simple_bind(mx.cpu(), a=(2,))
    exe.forward(is_train=True)
    train_step()
    exe.forward()
    train_step()
    assert settled == [1, 1, 1, 1]
