"""Elastic training under mxhorovodrun's driver, for tests/test_elastic_driver.py.

A small Dense model, DistributedTrainer with momentum SGD, 96 samples, 4 per rank and step,
ElasticSampler, a commit every COMMIT_EVERY steps. Rank 0 appends to $ELASTIC_LOG:
  RESET <generation> <size>    (the reset callback, in every job after the first)
  START <generation> <size> <counter loaded>
  STEP <generation> <epoch> <global indices, comma-separated>
  COMMIT <generation> <counter>
  END <generation>
and writes the final parameters to $ELASTIC_LOG.params.npz. ELASTIC_KILL=G:R:S makes rank R
of generation G (with ELASTIC_KILL_HOST=1: every rank of host number R, the cross rank)
SIGKILL itself; ELASTIC_LINK_DOWN=G:H:S: the first rank of host number H takes its eth0
down (a network-namespace host) after its step S of job G
after its step S of that job, between two commits. ELASTIC_FAIL=G:S raises a ValueError on
rank 0 (with ELASTIC_FAIL_ALL=1: on every rank) at step S of generation G (a bug of the
script: no retry). ELASTIC_STEP_SLEEP:
seconds of sleep per step (time for the driver to see a new host). ELASTIC_PSET=1 (with
HOROVOD_DYNAMIC_PROCESS_SETS=1): after training, every rank adds the process set {0, size-1}
and its members allreduce 'pset_check' in it, each checking the sum against numpy; every
rank prints 'PSET <generation> <rank> <size> ok'. ELASTIC_COMMIT_EVERY: steps between
commits (default 2). ELASTIC_CHECK=1: ``state.check_host_updates()`` after every other
step (a commit when the hosts changed, logged as COMMIT)."""
import os
import signal
import time

import mxnet as mx
import numpy as np

import mxhorovod as hvd

EPOCHS, N, B, DIM, CLASSES = 3, 96, 4, 5, 3
COMMIT_EVERY = int(os.environ.get("ELASTIC_COMMIT_EVERY", "2"))
CHECK = os.environ.get("ELASTIC_CHECK") == "1"

hvd.init()
gen = int(os.environ.get("MXHOROVOD_ELASTIC_GENERATION", "0"))
LOG = os.environ["ELASTIC_LOG"]


def data():
    rng = np.random.RandomState(0)
    return rng.rand(N, DIM).astype(np.float32), rng.randint(0, CLASSES, size=N).astype(np.float32)


def model():
    mx.random.seed(1)
    net = mx.gluon.nn.Dense(CLASSES, in_units=DIM)
    net.initialize(mx.init.Xavier())
    return net


def note(line):
    if os.environ.get("ELASTIC_TIMES") and line.split()[0] in ("START", "STEP"):
        stamp(line.split()[0].lower(), gen)
    if hvd.rank() == 0:
        with open(LOG, "a") as f:
            f.write(line + "\n")


def stamp(what, *more):
    """ELASTIC_TIMES=1 (benchmarks/elastic.py): 'TIME what ... unix-time' lines."""
    if os.environ.get("ELASTIC_TIMES") and (hvd.rank() == 0 or what == "kill"):
        with open(LOG, "a") as f:
            f.write("TIME %s %s %.3f\n" % (what, " ".join(str(m) for m in more), time.time()))


X, Y = data()
net = model()
trainer = hvd.DistributedTrainer(net.collect_params(), "sgd",
                                 {"learning_rate": 0.1, "momentum": 0.9})
sampler = hvd.elastic.ElasticSampler(list(range(N)), shuffle=True, seed=3)
state = hvd.elastic.GluonState(net, trainer, epoch=0, steps=0, sampler=sampler)
state.register_reset_callbacks([lambda: note("RESET %d %d" % (gen, hvd.size()))])
kill = [int(v) for v in os.environ.get("ELASTIC_KILL", "-1:-1:-1").split(":")]
link_down = [int(v) for v in os.environ.get("ELASTIC_LINK_DOWN", "-1:-1:-1").split(":")]
fail = [int(v) for v in os.environ.get("ELASTIC_FAIL", "-1:-1").split(":")]
pause = float(os.environ.get("ELASTIC_STEP_SLEEP", "0"))
loss_fn = mx.gluon.loss.SoftmaxCrossEntropyLoss()


def commit(state):
    try:
        state.commit()
    finally:  # saved and written before HostsUpdatedInterrupt is raised
        note("COMMIT %d %d" % (gen, state._commit_counter))


def check(state):
    before = state._commit_counter
    try:
        state.check_host_updates()
    finally:  # a host change commits before HostsUpdatedInterrupt is raised
        if state._commit_counter != before:
            note("COMMIT %d %d" % (gen, state._commit_counter))


@hvd.elastic.run
def train(state):
    note("START %d %d %d" % (gen, hvd.size(), state._commit_counter))
    done_here = 0
    while state.epoch < EPOCHS:
        indices = list(iter(state.sampler))
        for start in range(0, len(indices), B):
            mine = indices[start:start + B]
            x, y = mx.nd.array(X[mine]), mx.nd.array(Y[mine])
            with mx.autograd.record():
                loss = loss_fn(net(x), y)
            loss.backward()
            trainer.step(len(mine))
            everyone = hvd.allgather_object(mine, name="indices")
            note("STEP %d %d %s" % (gen, state.epoch,
                                     ",".join(str(i) for part in everyone for i in part)))
            state.sampler.record_batch(start // B, len(mine))
            state.steps += 1
            done_here += 1
            if pause:
                time.sleep(pause)
            if gen == fail[0] and done_here == fail[1] and \
                    (hvd.rank() == 0 or os.environ.get("ELASTIC_FAIL_ALL") == "1"):
                raise ValueError("a bug of the script")
            if gen == kill[0] and done_here == kill[2]:
                net.weight.data().wait_to_read()
                by_host = os.environ.get("ELASTIC_KILL_HOST") == "1"
                if (hvd.cross_rank() if by_host else hvd.rank()) == kill[1]:
                    if hvd.local_rank() == 0:
                        stamp("kill")
                    os.kill(os.getpid(), signal.SIGKILL)
                time.sleep(30)  # the others wait here to be killed, as in a collective
            if gen == link_down[0] and done_here == link_down[2] and \
                    hvd.cross_rank() == link_down[1] and hvd.local_rank() == 0:
                net.weight.data().wait_to_read()
                import subprocess
                subprocess.run(["ip", "link", "set", "eth0", "down"], check=True)
            if state.steps % COMMIT_EVERY == 0:
                commit(state)
            elif CHECK:
                check(state)
        state.epoch += 1
        state.sampler.set_epoch(state.epoch)
        commit(state)


train(state)
if os.environ.get("ELASTIC_PSET") == "1":
    members = sorted({0, hvd.size() - 1})
    ps = hvd.add_process_set(members)
    assert ps.included() == (hvd.rank() in members), (ps, hvd.rank())
    if ps.included():
        def mine(r):
            return np.arange(7, dtype=np.float32) * (r + 1) + gen
        got = hvd.allreduce(mx.nd.array(mine(hvd.rank())), average=False, name="pset_check",
                            process_set=ps).asnumpy()
        np.testing.assert_array_equal(got, sum(mine(r) for r in members))
    # Rank 1 (outside) must not shut down before the set's collective ran: a global one.
    done = hvd.allreduce(mx.nd.ones((1,)), average=False, name="pset_done").asnumpy()
    assert done[0] == hvd.size(), done
    print("PSET %d %d %d ok" % (gen, hvd.rank(), hvd.size()), flush=True)
note("END %d" % gen)
if hvd.rank() == 0:
    np.savez(LOG + ".params.npz", **{k: v.data().asnumpy() for k, v in
                                     net.collect_params().items()})
print("RANK %d OK" % hvd.rank(), flush=True)
