"""A gluon.Trainer with a DistributedOptimizer over a process set, its states saved
(``save_states`` pickles the wrapper with its set) and loaded after a new ``init()`` that
registered the sets in another order: the loaded wrapper reduces over the set with the same
ranks registered now. Before, the pickle carried the set's id from the first session, which
named the other set there: rank 0 trained alone without a word and the other ranks failed or
hung. Ranks 0 and 1 train together, the others alone; each ends equal to one process
trained 4 steps on its concatenated batch (2 before the save, 2 after the load, momentum
kept). Also: a pickled set loads as the registered set with its ranks (the same object),
the global set as ``global_process_set``, and a set no longer registered as an unregistered
copy whose collectives raise. Prints RANK <r> OK."""
import os
import pickle
import tempfile

import mxnet as mx
import numpy as np
from mxnet import gluon

import mxhorovod as hvd
from training_common import assert_close, copy_params, global_data, mlp, param_arrays, train_rows

STEPS, B, LR = 4, 4, 0.1


def sets():
    """The pair that trains together and another set holding rank 1 (and the last rank)."""
    n = int(os.environ["PMI_SIZE"])
    return hvd.ProcessSet([0, 1]), hvd.ProcessSet(sorted({1, n - 1}))


def opt():
    return mx.optimizer.SGD(learning_rate=LR, momentum=0.9)


pair, other = sets()
hvd.init(process_sets=[other, pair])  # pair gets id 2
r, n = hvd.rank(), hvd.size()
x, y = global_data(STEPS, B)
rows = slice(0, 2 * B) if r < 2 else slice(r * B, (r + 1) * B)  # what one process sees
mine = slice(r * B, (r + 1) * B)


def train(net, trainer, steps, rows):
    train_rows(net, trainer, x, y, steps, rows)


net = mlp("st_")
start = hvd.broadcast_object(param_arrays(net), root_rank=0)
for p, v in zip(net.collect_params().values(), start):
    p.set_data(mx.nd.array(v))
ref = mlp("st_ref_")
copy_params(net, ref)
ref_trainer = gluon.Trainer(ref.collect_params(), opt(), kvstore=None)
train(ref, ref_trainer, range(STEPS), rows)

trainer = gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(opt(), process_set=pair),
                        kvstore=None)
train(net, trainer, range(2), mine)
states = os.path.join(tempfile.mkdtemp(), "states")
trainer.save_states(states)
weights = param_arrays(net)
# shutdown() on one rank stops every rank: wait for all first (a global collective).
hvd.allreduce(mx.nd.ones((1,)), name="saved").wait_to_read()
hvd.shutdown()

pair2, other2 = sets()
hvd.init(process_sets=[pair2, other2])  # pair2 gets id 1, other2 id 2 (the pair's old id)
net2 = mlp("st2_")
for p, v in zip(net2.collect_params().values(), weights):
    p.set_data(mx.nd.array(v))
trainer2 = gluon.Trainer(net2.collect_params(),
                         hvd.DistributedOptimizer(opt(), process_set=pair2), kvstore=None)
trainer2.load_states(states)
assert trainer2._optimizer._process_set is pair2, trainer2._optimizer._process_set
train(net2, trainer2, range(2, STEPS), mine)
assert_close(param_arrays(net2), param_arrays(ref), LR,
             "states loaded after a new init (rank %d)" % r)

# A pickled set loads as the set registered now with its ranks (the same object).
assert pickle.loads(pickle.dumps(pair2)) is pair2
assert pickle.loads(pickle.dumps(hvd.ProcessSet([0, 1]))) is pair2
assert pickle.loads(pickle.dumps(hvd.global_process_set)) is hvd.global_process_set
kept = pickle.dumps(other2)
hvd.allreduce(mx.nd.ones((1,)), name="checked").wait_to_read()
hvd.shutdown()
hvd.init()  # other2 is not registered in this session
loaded = pickle.loads(kept)
assert loaded.process_set_id is None and loaded.ranks == other2.ranks, loaded
if r in loaded.ranks:
    try:
        hvd.allreduce(mx.nd.ones((1,)), process_set=loaded, name="stale")
        raise AssertionError("a set of an earlier session was used")
    except hvd.InvalidArgumentError as e:
        assert "not registered" in str(e), e
assert hvd.allreduce(mx.nd.ones((1,)), op=hvd.Sum, name="done").asscalar() == n
hvd.shutdown()
os.remove(states)
print("RANK %d OK" % r, flush=True)
