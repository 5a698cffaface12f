"""hvd.init() called by four threads at once (none of them the main thread): every call
returns, and the job works (before: a call made while another was starting joined the
starting background thread and waited forever). Then hvd.shutdown() by three threads at
once, with collectives pending (before: they joined the thread together, a hang), and init()
again. Prints RANK <r> OK."""
import threading

import mxnet as mx
import numpy as np

import mxhorovod as hvd

errors = []


def at_once(fn, threads):
    def call():
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(repr(e))
    threads = [threading.Thread(target=call) for _ in range(threads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(40)
    assert not any(t.is_alive() for t in threads), "a %s() call never returned" % fn.__name__
    assert not errors, errors


def check(tag):
    r, n = hvd.rank(), hvd.size()
    for step in range(3):  # unnamed: the automatic names agree between ranks
        out = hvd.allreduce(mx.nd.ones((5,)) * (r + 1 + step), op=hvd.Sum).asnumpy()
        assert np.all(out == n * (n + 1) / 2 + n * step), (tag, r, step, out)


at_once(hvd.init, 4)
check("first")
r, n = hvd.rank(), hvd.size()
pending = [hvd.allreduce(mx.nd.ones((1000,)), op=hvd.Sum, name="pending.%d" % i) for i in range(5)]
at_once(hvd.shutdown, 3)
assert not hvd.is_initialized()
for p in pending:  # shutdown() let them run first
    assert np.all(p.asnumpy() == n), (r, p.asnumpy()[:4])
hvd.init()
check("again")
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
