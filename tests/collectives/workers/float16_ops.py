"""float16 allreduce of every op (Sum, Average, Min, Max, Product) with prescale and
postscale, on 2 ranks, checked bit for bit on every rank against numpy's float32
arithmetic rounded to float16 (NaN results as the one quiet NaN 0x7E00). Odd lengths (the
vector kernels' tails), alone (in place and not) and fused with a second tensor, below and
above the cross-memory-attach threshold (64 KiB). Rank 0 writes every result's bits to
argv[1], for the test to compare between MXHOROVOD_SIMD paths. Prints RANK <r> OK."""
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

NAN_BITS = 0x7E00
SPECIAL = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 6e-8, -6e-8, 1e-5, 60000.0, -60000.0,
                    65504.0, 0.1, -2.5, 1.0, 3.0e-5], dtype=np.float16)

hvd.init()
r, n = hvd.rank(), hvd.size()
assert n == 2, "this worker's expectations are for 2 ranks (one rounding per element)"


def values(rank, count, salt):
    rng = np.random.default_rng(1000 * salt + rank)
    x = (rng.standard_normal(count) * 4).astype(np.float16)
    k = min(count, SPECIAL.size)
    # Each rank's specials at other places: NaN against a number, Inf against -Inf, ...
    x[:k] = np.roll(SPECIAL, 3 * rank)[:k]
    return x


def h(f32):
    """float32 -> float16 bits, nearest even; NaN as NAN_BITS."""
    with np.errstate(all="ignore"):
        out = f32.astype(np.float16).view(np.uint16).copy()
    out[np.isnan(f32)] = NAN_BITS
    return out


def f(bits):
    return bits.view(np.float16).astype(np.float32)


def scaled(bits, factor):
    """What ScaleBuffer / ScaleCopy give: the bits unchanged for a factor of exactly 1 with
    no division (a copy), else float32 times the factor rounded to float32."""
    if factor is None:
        return bits
    with np.errstate(all="ignore"):
        return h(f(bits) * np.float32(factor))


def expected(op, xs, pre, post):
    ins = [scaled(x.view(np.uint16), None if pre == 1.0 else pre) for x in xs]
    a, b = f(ins[0]), f(ins[1])
    with np.errstate(all="ignore"):
        if op in (hvd.Sum, hvd.Average):
            red = h(a + b)
        elif op == hvd.Product:
            red = h(a * b)
        else:
            m = np.minimum(a, b) if op == hvd.Min else np.maximum(a, b)
            zeros = (a == 0) & (b == 0)
            neg = (np.signbit(a) | np.signbit(b)) if op == hvd.Min else (np.signbit(a) & np.signbit(b))
            m[zeros] = np.where(neg[zeros], np.float32(-0.0), np.float32(0.0))
            red = h(m)
    divisor = n if op == hvd.Average else 1
    return scaled(red, None if (post == 1.0 and divisor == 1) else post / divisor)


OPS = [hvd.Sum, hvd.Average, hvd.Min, hvd.Max, hvd.Product]
SCALES = [(1.0, 1.0), (0.5, 3.0), (1 / 3, 1.0), (1.0, 0.1)]
LENGTHS = [1, 15, 17, 33, 1001, 40001, 300001]
pending = []
salt = 0
for op in OPS:
    for pre, post in SCALES:
        for count in LENGTHS:
            salt += 1
            xs = [values(q, count, salt) for q in range(n)]
            other = [values(q, 1003, salt + 7919) for q in range(n)]
            name = "f16.%d.%g.%g.%d" % (op, pre, post, count)
            kw = dict(op=op, prescale_factor=pre, postscale_factor=post)
            alone = hvd.allreduce(mx.nd.array(xs[r], dtype="float16"), name=name, **kw)
            inplace = mx.nd.array(xs[r], dtype="float16")
            hvd.allreduce_(inplace, name=name + ".inplace", **kw)
            group = hvd.grouped_allreduce([mx.nd.array(xs[r], dtype="float16"),
                                           mx.nd.array(other[r], dtype="float16")],
                                          name=name + ".group", **kw)
            want = expected(op, xs, pre, post)
            want_other = expected(op, other, pre, post)
            pending.append((name, want, [("alone", alone), ("in place", inplace), ("fused", group[0])]))
            pending.append((name + " fused other", want_other, [("fused", group[1])]))

bits = []
for name, want, outs in pending:
    for what, arr in outs:
        got = arr.asnumpy().view(np.uint16)
        bad = np.flatnonzero(got != want)
        assert bad.size == 0, "%s %s on rank %d: %d of %d wrong, first at %d: got %04x want %04x" % (
            name, what, r, bad.size, got.size, bad[0], got[bad[0]], want[bad[0]])
        bits.append(got.tobytes())
mine = b"".join(bits)
assert len(set(hvd.allgather_object(mine))) == 1, "ranks differ"
if r == 0:
    with open(sys.argv[1], "wb") as fh:
        fh.write(mine)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
