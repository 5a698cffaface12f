"""How a rank's exit meets its peers' work. Modes:

shutdown_after_last_step: as last_step, but every rank calls hvd.shutdown() right after its
    loop (rank 1 starts its last step 0.3 s late) and then checks its weights: shutdown()
    lets this rank's called collectives run first, as the exit does (the last step failed on
    every rank: "did not run: mxhorovod is not running" / "a peer rank shut down").
last_step: a DistributedTrainer loop whose last step() returns before its collectives ran;
    the ranks other than rank 0 exit right after it, while rank 0 starts its last step
    0.3 s later and then checks its weights. Every rank's exit must first let its called
    collectives run (before: rank 0's last step failed with "a peer rank shut down", and the
    job ended by MPI_Abort). Rank 0 checks the weights after the last step: w = 1 - 5 *
    0.1 * mean_r(r + 1) for the Dense(1) below.
fork: os.fork() after init(); a collective in the child raises (it hung), the child exits
    normally (its exit must not join the parent's background thread, which it does not
    have: that hung) and the parent goes on with collectives.
fork_failures: children forked after init() end by SIGTERM (as a DataLoader's worker pool
    ends its workers), by an unhandled exception, and by SIGSEGV: only the child ends (the
    exception and SIGSEGV were MPI_Abort / a line claiming the rank died: the exception in
    a child ended the whole job); the test checks the lines printed.
extra_step [set]: the ranks other than 0 run one DistributedTrainer step more than rank 0
    (uneven data): that step fails with the reason (a peer shut down), not the advice to
    call hvd.init() that the message gave before it (with "set", a trainer over a registered
    set: not "process set 1 is not registered").
peer_blocked: rank 0 exits with a collective pending that no peer calls, while the peers
    are blocked in another: the exit stops waiting once nothing completes.
Prints RANK <r> OK."""
import os
import sys
import time

import mxnet as mx
import numpy as np
from mxnet import autograd, gluon

import mxhorovod as hvd

mode = sys.argv[1]
in_set = sys.argv[2:] == ["set"]  # extra_step: the trainer over a registered set of all ranks
everyone = hvd.ProcessSet(list(range(int(os.environ.get("PMI_SIZE", "1")))))
hvd.init(process_sets=[everyone] if in_set else None)
r, n = hvd.rank(), hvd.size()

if mode in ("last_step", "shutdown_after_last_step"):
    net = gluon.nn.Dense(1, in_units=1, use_bias=False)
    net.initialize(mx.init.One())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1})
    steps = 5
    late = 0 if mode == "last_step" else 1
    for s in range(steps):
        if r == late and s == steps - 1:
            time.sleep(0.3)
        with autograd.record():
            loss = net(mx.nd.ones((1, 1)) * (r + 1)).sum()
        loss.backward()
        trainer.step(1)
    if mode == "shutdown_after_last_step":
        hvd.shutdown()
    if r == 0 or mode == "shutdown_after_last_step":
        got = net.weight.data().asnumpy()[0, 0]
        want = 1 - steps * 0.1 * np.mean(np.arange(1, n + 1))
        assert abs(got - want) < 1e-5, (got, want)
    # No waitall, no barrier: the others leave now.
elif mode == "fork":
    assert hvd.allreduce(mx.nd.ones((2,)) * r, op=hvd.Sum, name="pre").asnumpy()[0] == n * (n - 1) / 2
    pid = os.fork()
    if pid == 0:
        assert hvd.rank() == r
        try:  # a collective in the child: refused (it hung)
            hvd.allreduce(mx.nd.ones((2,)), name="in_child")
            os._exit(3)
        except ValueError as e:
            if "fork" not in str(e):
                os._exit(4)
        sys.exit(0)  # a normal exit: the atexit handlers run in the child
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    for i in range(3):
        got = hvd.allreduce(mx.nd.ones((2,)) * r, op=hvd.Sum, name="post%d" % i).asnumpy()
        assert got[0] == n * (n - 1) / 2, got
elif mode == "fork_failures":
    import signal

    def child(body):
        pid = os.fork()
        if pid == 0:
            body()
            os._exit(0)
        _, status = os.waitpid(pid, 0)
        return status

    def wait_for_term():
        time.sleep(60)

    pid = os.fork()
    if pid == 0:
        wait_for_term()
        os._exit(0)
    time.sleep(0.3)
    os.kill(pid, signal.SIGTERM)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status

    def fail():
        raise RuntimeError("child of rank %d fails" % r)
    status = child(fail)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1, status

    status = child(lambda: os.kill(os.getpid(), signal.SIGSEGV))
    assert status != 0, status  # MXNet's own handler, run after ours, exits with 255
    for i in range(3):
        got = hvd.allreduce(mx.nd.ones((2,)) * r, op=hvd.Sum, name="post%d" % i).asnumpy()
        assert got[0] == n * (n - 1) / 2, got
elif mode == "extra_step":
    net = gluon.nn.Dense(1, in_units=1)
    net.initialize(mx.init.One())
    trainer = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.1},
                                     process_set=everyone if in_set else hvd.global_process_set)
    steps = 3 if r == 0 else 4
    try:
        for s in range(steps):
            if s == 3:
                while hvd.is_initialized():  # rank 0 has left (its exit shut it down)
                    time.sleep(0.01)
            with autograd.record():
                loss = net(mx.nd.ones((1, 1))).sum()
            loss.backward()
            trainer.step(1)
            mx.nd.waitall()
        assert r == 0, "the extra step ran"
    except ValueError as e:
        assert r != 0 and s == 3, (r, s, e)
        msg = str(e)
        assert "stopped: a peer rank shut down" in msg and "use hvd.init()" not in msg, msg
elif mode == "peer_blocked":
    # Rank 0 calls a collective no peer ever calls, then exits normally; the peers are
    # blocked in another one. The exit gives up waiting once nothing completes (here after
    # HOROVOD_STALL_CHECK_TIME_SECONDS=2) and the peers get the shutdown error.
    from mxnet.base import MXNetError
    t0 = time.time()
    if r == 0:
        hvd.allreduce(mx.nd.ones((2,)), name="only_rank0")
        print("RANK %d OK" % r, flush=True)
        sys.exit(0)
    try:
        hvd.allreduce(mx.nd.ones((2,)), name="only_others").asnumpy()
        raise AssertionError("no error after rank 0 left")
    except MXNetError as e:
        assert "shut down" in str(e), str(e)
    assert time.time() - t0 < 30, time.time() - t0
else:
    raise SystemExit("unknown mode %r" % mode)
print("RANK %d OK" % r, flush=True)
