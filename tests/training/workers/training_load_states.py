"""``gluon.Trainer.load_states`` keeps the Trainer's reduction, whatever saved the file.

The file gives the optimizer and its states; whether a DistributedOptimizer wraps it stays
the Trainer's (mxhorovod/training/patches.py). Each case trains 2 steps, saves, loads into a
Trainer made another way with the weights of the save, trains 2 more, and must end equal
to one process trained 4 steps on the concatenated batch (plain MXNet, momentum kept across
its own save / load):

- single-process states (a plain optimizer) into gluon.Trainer + DistributedOptimizer: the
  wrapper was dropped, each rank then stepped on its own batch (the ranks drifted apart);
- DistributedTrainer states (plain) into gluon.Trainer + DistributedOptimizer: the same;
- gluon.Trainer + DistributedOptimizer states into a DistributedTrainer: the wrapper came
  back, and the gradients were reduced twice;
- the same states into a plain gluon.Trainer of this rank alone (as a single-process
  evaluation or fine-tuning script after distributed training): it must step on this
  rank's batch only, with no collective (before, the loaded wrapper reduced).
Prints RANK <r> OK."""
import os
import tempfile

import mxnet as mx
from mxnet import gluon

import mxhorovod as hvd
from training_common import assert_close, global_data, mlp, param_arrays, train_rows

STEPS, B, LR = 4, 4, 0.1

hvd.init()
r, n = hvd.rank(), hvd.size()
x, y = global_data(STEPS, B)
every = slice(0, n * B)
mine = slice(r * B, (r + 1) * B)
folder = tempfile.mkdtemp()


def opt():
    return mx.optimizer.SGD(learning_rate=LR, momentum=0.9)


def train(net, trainer, steps, rows):
    train_rows(net, trainer, x, y, steps, rows)


def net_like(prefix, weights):
    net = mlp(prefix)
    for p, v in zip(net.collect_params().values(), weights):
        p.set_data(mx.nd.array(v))
    return net


start = mlp("ls_start_")
weights0 = hvd.broadcast_object(param_arrays(start), root_rank=0)


def one_process(rows, prefix):
    """Plain MXNet, 4 steps on ``rows``, its own save / load after 2: (weights after 2,
    states file after 2, weights after 4)."""
    net = net_like(prefix, weights0)
    trainer = gluon.Trainer(net.collect_params(), opt(), kvstore=None)
    train(net, trainer, range(2), rows)
    path = os.path.join(folder, prefix)
    trainer.save_states(path)
    half = param_arrays(net)
    trainer.load_states(path)
    train(net, trainer, range(2, STEPS), rows)
    return half, path, param_arrays(net)


ref_half, ref_states, ref_end = one_process(every, "ls_ref_")


def wrapped_trainer(net):
    return gluon.Trainer(net.collect_params(), hvd.DistributedOptimizer(opt()), kvstore=None)


def check(net, trainer, want, what, wrapper):
    is_wrapped = isinstance(trainer._optimizer, hvd.DistributedOptimizer)
    assert is_wrapped == wrapper, "%s: optimizer %s after load_states (rank %d)" % (
        what, type(trainer._optimizer).__name__, r)
    assert all(u.optimizer is trainer._optimizer for u in trainer._updaters), what
    assert isinstance(trainer._optimizer.param_dict, dict) and \
        len(trainer._optimizer.param_dict) == len(trainer._params), what
    train(net, trainer, range(2, STEPS), mine)
    assert_close(param_arrays(net), want, LR, "%s (rank %d)" % (what, r))


# 1. single-process states into gluon.Trainer + DistributedOptimizer
net = net_like("ls1_", ref_half)
trainer = wrapped_trainer(net)
trainer.load_states(ref_states)
check(net, trainer, ref_end, "single-process states into a DistributedOptimizer", True)

# 2. DistributedTrainer states into gluon.Trainer + DistributedOptimizer
net = net_like("ls2a_", weights0)
dt = hvd.DistributedTrainer(net.collect_params(), opt())
train(net, dt, range(2), mine)
path = os.path.join(folder, "dt")
dt.save_states(path)
net = net_like("ls2_", param_arrays(net))
trainer = wrapped_trainer(net)
trainer.load_states(path)
check(net, trainer, ref_end, "DistributedTrainer states into a DistributedOptimizer", True)

# 3. gluon.Trainer + DistributedOptimizer states into a DistributedTrainer
net = net_like("ls3a_", weights0)
trainer = wrapped_trainer(net)
train(net, trainer, range(2), mine)
wrapped_states = os.path.join(folder, "wrapped")
trainer.save_states(wrapped_states)
half = param_arrays(net)
net = net_like("ls3_", half)
dt = hvd.DistributedTrainer(net.collect_params(), opt())
dt.load_states(wrapped_states)
check(net, dt, ref_end, "DistributedOptimizer states into a DistributedTrainer", False)

# 4. the same states into a plain Trainer of this rank alone: steps 3 and 4 on this rank's
# batch only, with no collective, from the momentum of the distributed steps 1 and 2 (the
# same as one process's on the concatenated batch: its states file gives the reference)
want_net = net_like("ls4ref_", ref_half)
want_trainer = gluon.Trainer(want_net.collect_params(), opt(), kvstore=None)
want_trainer.load_states(ref_states)
train(want_net, want_trainer, range(2, STEPS), mine)
net = net_like("ls4_", half)
plain = gluon.Trainer(net.collect_params(), opt(), kvstore=None)
plain.load_states(wrapped_states)
assert not isinstance(plain._optimizer, hvd.DistributedOptimizer), \
    "a plain Trainer got the file's DistributedOptimizer (rank %d)" % r
train(net, plain, range(2, STEPS), mine)
assert_close(param_arrays(net), param_arrays(want_net), LR,
             "plain Trainer after load_states (rank %d)" % r)

hvd.allreduce(mx.nd.ones((1,)), name="done").wait_to_read()
print("RANK %d OK" % r, flush=True)
