"""Checks shared by the multi-rank error workers (run as scripts beside this file)."""
import mxnet as mx
import numpy as np
from mxnet.base import MXNetError

import mxhorovod as hvd


def raises(call, *needles):
    """``call()`` raises MXNetError whose text holds every one of ``needles``."""
    try:
        call()
    except MXNetError as e:
        for s in needles:
            assert s in str(e), "expected %r in error: %s" % (s, e)
        return
    raise AssertionError("no error raised; wanted %s" % (needles,))


def works(tag):
    """A fresh Sum allreduce gives the right value on every rank (the job goes on)."""
    r, n = hvd.rank(), hvd.size()
    y = hvd.allreduce(mx.nd.ones((2,)) * (r + 1), op=hvd.Sum, name="ok." + tag)
    np.testing.assert_array_equal(y.asnumpy(), np.full((2,), n * (n + 1) / 2, "float32"))
