"""A collective whose input's producer failed on one rank only: MXNet's engine skips the
collective there (its input carries the error). The other ranks must get an error naming
that rank, not wait for it; the failing rank sees its own operator's error; the next
collectives work on every rank. Grouped and in-place forms too."""
import mxnet as mx
from mxnet.base import MXNetError

import mxhorovod as hvd
from support.expect import raises, works

hvd.init()
r, n = hvd.rank(), hvd.size()


class Boom(mx.operator.CustomOp):
    def forward(self, is_train, req, in_data, out_data, aux):
        if r == 0:
            raise RuntimeError("boom on rank 0")
        self.assign(out_data[0], req[0], in_data[0])


@mx.operator.register("mxhvd_boom")
class BoomProp(mx.operator.CustomOpProp):
    def list_arguments(self):
        return ["data"]

    def list_outputs(self):
        return ["output"]

    def infer_shape(self, in_shape):
        return in_shape, [in_shape[0]], []

    def create_operator(self, ctx, shapes, dtypes):
        return Boom()


def boom(shape):
    return mx.nd.Custom(mx.nd.ones(shape), op_type="mxhvd_boom")


mine = ()  # the custom operator's own error (MXNet does not keep its text)
theirs = ("allreduce 'after_boom' failed on rank 0", "skipped")
y = hvd.allreduce(boom((4,)), name="after_boom", op=hvd.Sum)
raises(y.asnumpy, *(mine if r == 0 else theirs))
works("1")

x = boom((3,))
hvd.allreduce_(x, name="inplace_boom")
raises(x.asnumpy, *(mine if r == 0 else ("allreduce 'inplace_boom' failed on rank 0",)))
works("2")

ys = hvd.grouped_allreduce([mx.nd.ones((2,)), boom((5,))], name="gboom", op=hvd.Sum)
raises(ys[1].asnumpy, *(mine if r == 0 else ("failed on rank 0",)))
works("3")

# A float32 array of 2-5 dims: the call first waits for the input (MKLDNN layout), which
# raises the producer's error at the call on rank 0; the call is submitted as failed there.
for tag, call in (("2d", lambda x: hvd.allreduce(x, name="boom_2d", op=hvd.Sum)),
                  ("g2d", lambda x: hvd.grouped_allreduce([x], name="gboom_2d")[0])):
    try:
        out = call(boom((2, 3)))
    except ValueError as e:
        assert r == 0, "rank %d raised at the call: %s" % (r, e)
    else:
        assert r != 0 or not mx.runtime.Features().is_enabled("MKLDNN"), \
            "rank 0 did not raise at the call"
        raises(out.asnumpy, *(mine if r == 0 else ("failed on rank 0", "could not be read")))
    works(tag)

# Broadcast waits for its input first: rank 0 (the root) raises at the call, every other
# rank gets the error at its read.
for tag, shape, call in (("b1", (3,), lambda x: hvd.broadcast(x, 0, name="bboom_1d")),
                         ("b2", (2, 3), lambda x: hvd.broadcast(x, 0, name="bboom_2d")),
                         ("b_", (4,), lambda x: hvd.broadcast_(x, 0, name="bboom_inplace"))):
    try:
        out = call(boom(shape))
    except (ValueError, MXNetError) as e:
        assert r == 0, "rank %d raised at the call: %s" % (r, e)
    else:
        assert r != 0, "rank 0 did not raise at the call"
        raises(out.asnumpy, "failed on rank 0", "could not be read")
    works(tag)

hvd.shutdown()
print("RANK %d OK" % r, flush=True)
