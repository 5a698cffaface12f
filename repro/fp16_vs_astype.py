"""DistributedTrainer with Compression.fp16 (mxhorovod's cast engine op) against the same run
with a subclass whose compress/decompress are astype (the old mx.nd path): the parameters
after N steps must be bit-identical, on every rank, in every configuration below.

Usage: mpirun -np 2 python repro/fp16_vs_astype.py [OUTFILE] [np]
Env knobs to vary: PSET=0,2 (trainers over that process set; the others train alone), SELF=fp16|astype|none (the run against itself), SANITY=1 (compare against Compression.none: must differ), MXHOROVOD_SIMD=portable, MXNET_ENGINE_TYPE=NaiveEngine.
Writes the fp16 run's parameter bits to OUTFILE (to compare across env settings)."""
import hashlib
import os
import sys

import numpy as np
import mxnet as mx
from mxnet import autograd, gluon

import mxhorovod as hvd

PSET = os.environ.get("PSET")  # e.g. "0,2": the trainers reduce over that process set
if PSET:
    _members = [int(r) for r in PSET.split(",")]
    _pset = hvd.ProcessSet(_members)
    hvd.init(process_sets=[_pset])
else:
    hvd.init()
R, S = hvd.rank(), hvd.size()
TRAINER_KW = {"process_set": _pset} if PSET else {}
NP_MODE = len(sys.argv) > 2 and sys.argv[2] == "np"
if NP_MODE:
    mx.npx.set_np()


class AstypeFP16(hvd.Compression.fp16):
    """The old path: compress/decompress defined here, so wire_path takes them."""
    @staticmethod
    def compress(tensor):
        return hvd.Compression.fp16.compress(tensor)

    @staticmethod
    def decompress(tensor, ctx):
        return hvd.Compression.fp16.decompress(tensor, ctx)


SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-40, -1e-40, 6e-8, 3e-8, 2.98e-8,
                    65504.0, 65519.9, 65520.0, 1e6, -7e4, 1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11],
                   dtype=np.float64)


def special_grad(shape, dtype, seed):
    rng = np.random.RandomState(seed)
    n = int(np.prod(shape))
    g = rng.randn(n) * 10 ** rng.uniform(-9, 5, n)
    pick = rng.rand(n) < 0.3
    g[pick] = SPECIAL[rng.randint(0, SPECIAL.size, pick.sum())]
    g = g.astype(dtype)
    if dtype == np.float32:  # NaN payloads too (signaling ones included)
        bits = g.view(np.uint32)
        k = rng.rand(n) < 0.05
        bits[k] = (rng.randint(0, 2, k.sum()).astype(np.uint32) << 31) | 0x7f800000 | \
            rng.randint(1, 1 << 23, k.sum()).astype(np.uint32)
    return g.reshape(shape)


def make_params(spec, tag):
    params = gluon.ParameterDict(tag)
    for k, (shape, dtype) in enumerate(spec):
        p = params.get("p%d" % k, shape=shape, dtype=dtype, init=mx.init.Zero())
    params.initialize(ctx=mx.cpu(0))
    rng = np.random.RandomState(5)
    for p in params.values():
        p.set_data(mx.nd.array(rng.randn(*p.shape), dtype=p.dtype) if not NP_MODE else
                   mx.np.array(rng.randn(*p.shape), dtype=p.dtype))
    return params


def direct(compression, spec, steps=3, special=False, grad_req="write", **kw):
    """Parameters with hand-set gradients (different on every rank)."""
    params = make_params(spec, "d%d_" % id(compression))
    if grad_req != "write":
        params.setattr("grad_req", grad_req)
    tr = hvd.DistributedTrainer(params, "sgd", {"learning_rate": 0.1, "momentum": 0.9},
                                compression=compression, **kw, **TRAINER_KW)
    for s in range(steps):
        for k, p in enumerate(params.values()):
            seed = 1000 * s + 10 * k + R
            g = special_grad(p.shape, p.dtype, seed) if special else \
                np.random.RandomState(seed).randn(*p.shape).astype(p.dtype)
            val = mx.np.array(g, dtype=p.dtype) if NP_MODE else mx.nd.array(g, dtype=p.dtype)
            if grad_req == "add":  # accumulate onto what is there
                val = p.grad() + val
            val.copyto(p.grad())  # (0-d arrays take no [:])
            p.data()._fresh_grad = True  # as backward marks it
        tr.step(4)
    return [p.data().asnumpy() for p in params.values()]


def convnet(compression, steps=3, infer_first=True, grad_req="write", deferred=False,
            **kw):
    """A real net: backward writes the gradients the cast reads (engine order), a 64-channel
    conv weight (MKLDNN layout after an inference forward), odd-size dense layers."""
    net = gluon.nn.HybridSequential()
    c = 0 if deferred else 1  # deferred: shapes known at the first forward
    net.add(gluon.nn.Conv2D(64, 3, padding=1, in_channels=3 * c), gluon.nn.Activation("relu"),
            gluon.nn.Conv2D(64, 3, padding=1, in_channels=64 * c), gluon.nn.Activation("relu"),
            gluon.nn.Conv2DTranspose(8, 3, padding=1, in_channels=64 * c),
            gluon.nn.BatchNorm(in_channels=8 * c),
            gluon.nn.Flatten(), gluon.nn.Dense(17, in_units=8 * 8 * 8 * c),
            gluon.nn.Dense(1, in_units=17 * c))
    mx.random.seed(11)
    net.initialize(mx.init.Xavier())
    if grad_req != "write":
        net.collect_params().setattr("grad_req", grad_req)
    net.hybridize()
    rng = np.random.RandomState(100 + R)
    if infer_first:
        net(mx.nd.array(rng.randn(2, 3, 8, 8))).wait_to_read()  # inference forward
    tr = hvd.DistributedTrainer(net.collect_params(), "sgd", {"learning_rate": 0.01},
                                compression=compression, **kw, **TRAINER_KW)
    loss_fn = gluon.loss.L2Loss()
    for s in range(steps):
        x = mx.nd.array(rng.randn(4, 3, 8, 8))
        y = mx.nd.array(rng.randn(4, 1))
        with autograd.record():
            loss = loss_fn(net(x), y)
        loss.backward()
        if grad_req == "add" and s % 2 == 0:
            continue  # accumulate two backward passes
        tr.step(4)  # no wait: the casts queue behind backward
        if grad_req == "add":
            net.collect_params().zero_grad()
        if infer_first:
            net(x).wait_to_read()
    return [p.data().asnumpy() for p in net.collect_params().values()]


ODD = [((1,), "float32"), ((15,), "float32"), ((17,), "float32"), ((4097,), "float32"),
       ((3, 5, 7), "float32"), ((33,), "float64"), ((9,), "float16"), ((2, 3), "float32")]
CONFIGS = {
    "odd_sizes_mixed_dtypes": lambda c: direct(c, ODD),
    "special_values": lambda c: direct(c, ODD, special=True),
    "grad_req_add": lambda c: direct(c, ODD, grad_req="add"),
    "buckets": lambda c: direct(c, ODD, special=True, gradient_as_bucket_view=True),
    "buckets_small_cap": lambda c: direct(c, ODD, gradient_as_bucket_view=True,
                                          bucket_cap_mb=0.01),
    "num_groups": lambda c: direct(c, ODD, special=True, num_groups=2),
    "num_groups_buckets": lambda c: direct(c, ODD, num_groups=3, gradient_as_bucket_view=True),
    "predivide": lambda c: direct(c, ODD, gradient_predivide_factor=2.0),
}
if not NP_MODE:
    CONFIGS["convnet"] = lambda c: convnet(c)
    CONFIGS["convnet_buckets"] = lambda c: convnet(c, gradient_as_bucket_view=True)
    CONFIGS["convnet_add"] = lambda c: convnet(c, steps=4, grad_req="add")
    CONFIGS["convnet_deferred_groups"] = lambda c: convnet(c, deferred=True, num_groups=2)

digest = hashlib.sha256()  # differs between ranks (BatchNorm's running statistics)
bad = []
for name, fn in CONFIGS.items():
    try:
        first = {"astype": AstypeFP16, "none": hvd.Compression.none}.get(
            os.environ.get("SELF"), hvd.Compression.fp16)
        new = fn(first)
        old = fn(hvd.Compression.none if os.environ.get("SANITY") else
                 first if os.environ.get("SELF") else AstypeFP16)
    except Exception as e:  # noqa
        bad.append("%s: raised %s: %s" % (name, type(e).__name__, str(e)[:300]))
        continue
    for k, (a, b) in enumerate(zip(new, old)):
        digest.update(a.tobytes())
        # The same bits on every rank (a rank's first 8 bytes of sha256, through allgather).
        mine = np.frombuffer(hashlib.sha256(a.tobytes()).digest()[:8], dtype=np.int64)
        every = hvd.allgather(mx.nd.array(mine, dtype=np.int64), name="x.%s.%d" % (name, k),
                              **TRAINER_KW) if not PSET or R in _members else \
            mx.nd.array(mine, dtype=np.int64)
        if len(set(every.asnumpy().tolist())) != 1 and "convnet" in name and k in (8, 9):
            pass  # BatchNorm's running mean and variance: local to each rank (as in Horovod)
        elif len(set(every.asnumpy().tolist())) != 1:
            bad.append("%s: param %d (%s %s) differs between ranks" % (name, k, a.dtype, a.shape))
        if a.dtype != b.dtype or a.tobytes() != b.tobytes():
            n = int((a.view(np.uint8) != b.view(np.uint8)).sum()) if a.shape == b.shape else -1
            bad.append("%s: param %d (%s %s) differs (%d bytes)" % (name, k, a.dtype, a.shape, n))
for line in bad:
    print("[rank %d] MISMATCH %s" % (R, line), flush=True)
print("[rank %d] %d configs, %d mismatches, digest %s" % (R, len(CONFIGS), len(bad),
                                                          digest.hexdigest()[:16]), flush=True)
if len(sys.argv) > 1 and sys.argv[1] != "-":
    with open("%s.%d" % (sys.argv[1], R), "w") as f:
        f.write(digest.hexdigest())
hvd.allreduce(mx.nd.ones((1,)), name="end").wait_to_read()  # no rank shuts down early
hvd.shutdown()
