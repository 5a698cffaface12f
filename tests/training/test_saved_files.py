"""Files written by mxhorovod 0.1.0 (the flat layout) load with today's package: pickles
name module paths, so the paths they name are kept as thin faces.

tests/training/data/ holds a gluon.Trainer states file with a DistributedOptimizer (it
names ``mxhorovod.optimizer.DistributedOptimizer`` and ``mxhorovod.process_sets``) and a
pickle of the global set and a set of ranks [0, 1] (``mxhorovod.process_sets._unpickle``),
made by data/make_saved_files.py on 2 ranks with the 0.1.0 layout: one SGD step, momentum
0.9, learning rate 0.1, on Dense(2, in_units=3) with every weight 0.5 and a batch of 4 ones.
"""
import os
import subprocess
import sys

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")

LOAD = r"""
import pickle, sys
import mxnet as mx
import numpy as np
import mxhorovod as hvd
hvd.init()
data = sys.argv[1]
raw = open(data + "/trainer_distributed_optimizer.states", "rb").read()
assert b"mxhorovod.optimizer" in raw and b"mxhorovod.process_sets" in raw, raw
net = mx.gluon.nn.Dense(2, in_units=3)
net.initialize(mx.init.Constant(0.5))
opt = hvd.DistributedOptimizer(mx.optimizer.SGD(learning_rate=0.3, momentum=0.5))
trainer = mx.gluon.Trainer(net.collect_params(), opt, kvstore=None)
trainer.load_states(data + "/trainer_distributed_optimizer.states")
loaded = trainer._optimizer
assert loaded is opt, type(loaded)                      # the Trainer keeps its reduction
inner = loaded._optimizer
assert type(inner) is mx.optimizer.SGD, type(inner)
assert (inner.learning_rate, inner.momentum) == (0.1, 0.9), (inner.learning_rate, inner.momentum)
# One step on gradient 1 (4 ones, averaged over 2 ranks, rescaled by 1/4): momentum -0.1.
states = trainer._updaters[0].states
assert sorted(states) == [0, 1], sorted(states)
for index, state in states.items():
    np.testing.assert_allclose(state.asnumpy(), -0.1, rtol=1e-6)
raw = open(data + "/process_sets.pkl", "rb").read()
assert b"mxhorovod.process_sets" in raw and b"_unpickle" in raw, raw
sets = pickle.loads(raw)
assert sets["global"] is hvd.global_process_set, sets
assert isinstance(sets["set"], hvd.ProcessSet) and sets["set"].ranks == [0, 1], sets["set"]
print("LOADED OK")
"""


def test_states_and_process_sets_saved_by_the_flat_layout_load():
    proc = subprocess.run([sys.executable, "-c", LOAD, DATA], capture_output=True, text=True,
                          timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and "LOADED OK" in proc.stdout, proc.stdout + proc.stderr



WRITE = r"""
import pickle, sys
import mxnet as mx
import mxhorovod as hvd
hvd.init()
net = mx.gluon.nn.Dense(2, in_units=3)
net.initialize()
trainer = mx.gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(mx.optimizer.SGD()),
                           kvstore=None)
trainer.save_states(sys.argv[1] + "/now.states")
with open(sys.argv[1] + "/now.pkl", "wb") as f:
    pickle.dump([hvd.global_process_set, hvd.ProcessSet([0]),
                 hvd.InvalidArgumentError("x")], f)
loaded = pickle.load(open(sys.argv[1] + "/now.pkl", "rb"))
assert loaded[0] is hvd.global_process_set and loaded[1].ranks == [0], loaded
assert type(loaded[2]) is hvd.InvalidArgumentError, loaded
print("WROTE OK")
"""


def test_files_written_now_name_the_stable_paths(tmp_path):
    # What 0.1.0 reads, and what no later move of the code breaks: the faces' paths (and
    # the public one of the error), never a module of common/ or training/.
    proc = subprocess.run([sys.executable, "-c", WRITE, str(tmp_path)], capture_output=True,
                          text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and "WROTE OK" in proc.stdout, proc.stdout + proc.stderr
    states = (tmp_path / "now.states").read_bytes()
    objects = (tmp_path / "now.pkl").read_bytes()
    assert b"mxhorovod.optimizer" in states and b"DistributedOptimizer" in states, states
    assert b"mxhorovod.process_sets" in objects and b"_unpickle" in objects, objects
    assert b"global_process_set" in objects and b"InvalidArgumentError" in objects, objects
    for raw in (states, objects):
        for internal in (b"mxhorovod.common", b"mxhorovod.training", b"mxhorovod.collectives"):
            assert internal not in raw, (internal, raw)
