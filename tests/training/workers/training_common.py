"""Shared pieces of the training workers: tiny models, deterministic data, comparisons.

Every rank builds the whole global batch from a fixed seed and takes its own shard, so it
can also train a local reference model on the concatenated batch and compare.
"""
import numpy as np
import mxnet as mx
from mxnet import gluon

import mxhorovod as hvd

IN, HIDDEN, CLASSES = 10, 8, 3


def global_data(steps, batch_per_rank, seed=0):
    """X: (steps, size*batch_per_rank, IN) float32, y: (steps, size*batch_per_rank) int."""
    rng = np.random.RandomState(seed)
    n = hvd.size() * batch_per_rank
    x = rng.randn(steps, n, IN).astype(np.float32)
    y = rng.randint(0, CLASSES, size=(steps, n)).astype(np.float32)
    return x, y


def shard(a, batch_per_rank):
    """This rank's rows of a (steps, global_batch, ...) array."""
    r = hvd.rank()
    return a[:, r * batch_per_rank:(r + 1) * batch_per_rank]


def mlp(prefix):
    """Dense-tanh-Dense, no BatchNorm or Dropout; a multiplier on two parameters."""
    net = gluon.nn.HybridSequential(prefix=prefix)
    with net.name_scope():
        net.add(gluon.nn.Dense(HIDDEN, activation="tanh", in_units=IN))
        net.add(gluon.nn.Dense(CLASSES, in_units=HIDDEN))
    # Different initial values on every rank: broadcast_parameters must fix that.
    net.initialize(mx.init.Uniform(0.5 + 0.1 * hvd.rank()))
    params = net.collect_params()
    params[prefix + "dense1_bias"].lr_mult = 0.5
    params[prefix + "dense0_weight"].wd_mult = 0.0
    return net


def train_rows(net, trainer, x, y, steps, rows):
    """Trains ``net`` on rows ``rows`` (a slice of the global batch) of each step in
    ``steps`` with softmax cross-entropy, ``trainer.step`` taking the rows' count."""
    loss_fn = gluon.loss.SoftmaxCrossEntropyLoss()
    for s in steps:
        with mx.autograd.record():
            loss = loss_fn(net(mx.nd.array(x[s, rows])), mx.nd.array(y[s, rows]))
        loss.backward()
        trainer.step(rows.stop - rows.start)


def copy_params(src, dst):
    """Copy values of the gluon net src into dst (same structure, different prefix)."""
    for ps, pd in zip(src.collect_params().values(), dst.collect_params().values()):
        pd.set_data(ps.data())


def param_arrays(net):
    return [p.data().asnumpy() for p in net.collect_params().values()]


def assert_close(got, want, lr, what):
    """Relative 1e-4 plus an absolute term scaled by the learning rate."""
    assert len(got) == len(want), what
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5 * lr + 1e-7,
                                   err_msg="%s: array %d on rank %d" % (what, k, hvd.rank()))


def assert_same_on_all_ranks(arrays, what):
    """Every rank holds the same values (checked through the core's allgather)."""
    for k, a in enumerate(arrays):
        g = hvd.allgather(mx.nd.array(a.reshape(1, -1)), name="check.%s.%d" % (what, k))
        g = g.asnumpy()
        for r in range(hvd.size()):
            np.testing.assert_allclose(g[r], g[0], rtol=0, atol=0,
                                       err_msg="%s: array %d differs on rank %d" % (what, k, r))


def optimizer(kind, rescale_grad=1.0):
    if kind == "sgd":
        return mx.optimizer.SGD(learning_rate=0.1, momentum=0.9, wd=1e-3,
                                rescale_grad=rescale_grad)
    if kind == "adam":
        return mx.optimizer.Adam(learning_rate=0.01, wd=1e-3, rescale_grad=rescale_grad)
    if kind == "nag":
        return mx.optimizer.NAG(learning_rate=0.1, momentum=0.9, wd=1e-3,
                                rescale_grad=rescale_grad)
    if kind == "lamb":  # aggregated: MXNet passes lists of indices to update_multi_precision
        return mx.optimizer.LAMB(learning_rate=0.01, wd=1e-3, rescale_grad=rescale_grad)
    raise ValueError(kind)


def run_scenarios(scenarios, default_order):
    """Runs the scenarios named on the command line (all, in default_order, if none) after
    hvd.init(), then prints RANK <r> OK for run_ranks. With SCENARIO_RESULTS=DIR, each rank
    writes DIR/<scenario>.<rank>.json as each scenario ends: {"ok": true}, or {"ok": false,
    "error": its traceback} before the exception ends the rank (and so the job)."""
    import json
    import os
    import sys
    import traceback
    hvd.init()
    results = os.environ.get("SCENARIO_RESULTS")

    def record(name, **result):
        if results:
            with open(os.path.join(results, "%s.%d.json" % (name, hvd.rank())), "w") as f:
                json.dump(result, f)
    for name in sys.argv[1:] or default_order:
        try:
            scenarios[name]()
        except BaseException:
            record(name, ok=False, error=traceback.format_exc())
            raise
        record(name, ok=True)
        if hvd.rank() == 0:
            print("scenario %s ok" % name, flush=True)
    print("RANK %d OK" % hvd.rank(), flush=True)
