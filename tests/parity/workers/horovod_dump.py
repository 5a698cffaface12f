"""Dump every collective's output, per rank, for a fixed set of inputs, so that two
libraries' outputs can be compared bit for bit (HVD_MODULE=horovod.mxnet or mxhorovod).

mpirun -np N python horovod_dump.py OUTDIR [WORD ...]: for each case (only those whose
name holds one of the WORDs, if given), each rank writes OUTDIR/<case>.r<rank>.bin (the
outputs' raw bytes) and .txt (their dtypes and shapes), or .err (the exception's class).
python horovod_dump.py --compare DIR_A DIR_B: lists the case-ranks whose outputs differ.

Not run by pytest (it needs Horovod for the other side). On 2 and 3 ranks against
horovod.mxnet 0.28.1 the remaining differences are those of docs/horovod_differences.md:
Min / Max with NaN or -0, 0-size tensors (alone or in a grouped call), NaN sign bits,
integer results out of range, int64 Average beyond 2**53.
"""
import sys

if sys.argv[1:2] == ["--compare"]:
    import os as _os
    a_dir, b_dir = sys.argv[2], sys.argv[3]

    def _load(d, base):
        p = _os.path.join(d, base)
        if _os.path.exists(p + ".err"):
            return ("error", open(p + ".err").read())
        if _os.path.exists(p + ".txt"):
            return ("ok", open(p + ".txt").read(), open(p + ".bin", "rb").read())
        return ("missing",)
    bases = sorted({f.rsplit(".", 1)[0] for d in (a_dir, b_dir) for f in _os.listdir(d)})
    differ = 0
    for b in bases:
        x, y = _load(a_dir, b), _load(b_dir, b)
        if x != y:
            differ += 1
            print(b, "|", x[:2], "|", y[:2] if x[:2] != y[:2] else "same dtypes / shapes, other bytes")
    print("%d case-ranks, %d differ" % (len(bases), differ))
    sys.exit(0)

import importlib
import itertools
import os
import sys

import numpy as np
import mxnet as mx

hvd = importlib.import_module(os.environ.get("HVD_MODULE", "mxhorovod"))
hvd.init()
rank, size = hvd.rank(), hvd.size()
OUT = sys.argv[1]
WORDS = sys.argv[2:]
os.makedirs(OUT, exist_ok=True)

DTYPES = ["uint8", "int8", "int32", "int64", "float16", "float32", "float64"]
OPS = {"sum": hvd.Sum, "avg": hvd.Average, "min": hvd.Min, "max": hvd.Max, "prod": hvd.Product}
SHAPES = [(0,), (1,), (17,), (5, 7), (3, 4, 5), (2, 0, 3), (4, 3)]
FACTORS = [1.0, 0.5, 3.0, 1.0 / 3, -1.5, 0.1, 2.0 ** -20, 1e5]


def data(seed, r, shape, dtype, kind="normal"):
    rng = np.random.RandomState((seed * 7919 + r * 31) % (2 ** 31))
    if dtype.startswith("float"):
        if kind == "special":
            vals = np.array([np.inf, -np.inf, np.nan, -0.0, 0.0, 1e-40, 6.0e-8, 65504.0,
                             -65504.0, 1e38, 3.4e38, 1.0, -1.0, 0.1, 1e-310], dtype="float64")
            x = rng.choice(vals, size=shape)
        elif kind == "small":
            x = rng.randint(-2, 3, size=shape)
        else:
            x = rng.uniform(-100, 100, size=shape)
        with np.errstate(over="ignore"):
            return x.astype(dtype)
    info = np.iinfo(dtype)
    if kind == "special":
        x = rng.choice([info.min, info.max, info.min + 1, info.max - 1, 0, 1, -1 if info.min < 0 else 2],
                       size=shape)
    elif kind == "small":
        x = rng.randint(max(info.min, -2), 3, size=shape)
    else:
        lo, hi = max(info.min, -1000), min(info.max, 1000)
        x = rng.randint(lo, hi + 1, size=shape)
    return np.asarray(x).astype(dtype)


def save(case, outs):
    base = os.path.join(OUT, "%s.r%d" % (case, rank))
    if isinstance(outs, BaseException):
        with open(base + ".err", "w") as f:
            f.write(type(outs).__name__)
        return
    meta = []
    blobs = []
    for o in outs:
        a = o.asnumpy() if hasattr(o, "asnumpy") else np.asarray(o)
        meta.append("%s %s" % (a.dtype, a.shape))
        blobs.append(a.tobytes())
    with open(base + ".txt", "w") as f:
        f.write("\n".join(meta))
    with open(base + ".bin", "wb") as f:
        f.write(b"".join(blobs))


def run(case, fn):
    if WORDS and not any(w in case for w in WORDS):
        return
    try:
        outs = fn()
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        for o in outs:
            if hasattr(o, "wait_to_read"):
                o.wait_to_read()
        res = outs
    except Exception as e:  # noqa: BLE001
        res = e
    try:
        mx.nd.waitall()
    except Exception as e:  # noqa: BLE001
        if not isinstance(res, BaseException):
            res = e
    save(case, res)


seed = 0


def nd(a):
    return mx.nd.array(a, dtype=a.dtype)


# allreduce: dtype x op x shape x kind, plus factors
for dtype, (opn, op), shape, kind in itertools.product(DTYPES, OPS.items(), SHAPES,
                                                      ["normal", "special", "small"]):
    seed += 1
    if opn == "prod" and kind == "normal" and not dtype.startswith("float"):
        kind = "small"
    x = data(seed, rank, shape, dtype, kind)
    case = "ar.%s.%s.%s.%s" % (dtype, opn, "x".join(map(str, shape)) or "0d", kind)
    run(case, lambda: hvd.allreduce(nd(x), op=op, name=case))
    run(case + ".inplace", lambda: hvd.allreduce_(nd(x), op=op, name=case + ".ip"))

for dtype, opn, factor, where in itertools.product(DTYPES, ["sum", "avg"], FACTORS, ["pre", "post", "both"]):
    seed += 1
    x = data(seed, rank, (4, 6), dtype)
    kw = {}
    if where in ("pre", "both"):
        kw["prescale_factor"] = factor
    if where in ("post", "both"):
        kw["postscale_factor"] = factor
    case = "arscale.%s.%s.%s.%r" % (dtype, opn, where, factor)
    run(case, lambda: hvd.allreduce(nd(x), op=OPS[opn], name=case, **kw))
    if opn == "sum":
        case2 = "rsscale.%s.%s.%r" % (dtype, where, factor)
        x2 = data(seed, rank, (size * 3 + 1, 2), dtype)
        run(case2, lambda: hvd.reducescatter(nd(x2), op=hvd.Sum, name=case2, **kw))

# deprecated average= argument
for dtype in ["int32", "float32"]:
    seed += 1
    x = data(seed, rank, (5,), dtype)
    run("ar.average_true." + dtype, lambda: hvd.allreduce(nd(x), average=True, name="avgT" + dtype))
    run("ar.average_false." + dtype, lambda: hvd.allreduce(nd(x), average=False, name="avgF" + dtype))
    run("ar.default." + dtype, lambda: hvd.allreduce(nd(x), name="dflt" + dtype))

# grouped allreduce: mixed dtypes and shapes
for opn, op in OPS.items():
    seed += 1
    xs = [data(seed + k, rank, SHAPES[k % len(SHAPES)], DTYPES[k % len(DTYPES)],
               "small" if opn == "prod" else "normal") for k in range(9)]
    case = "gar.%s" % opn
    run(case, lambda: hvd.grouped_allreduce([nd(a) for a in xs], op=op, name=case))
    run(case + ".inplace", lambda: hvd.grouped_allreduce_([nd(a) for a in xs], op=op, name=case + ".ip"))
    run(case + ".scaled", lambda: hvd.grouped_allreduce([nd(a) for a in xs], op=op, name=case + ".sc",
                                                        prescale_factor=0.5, postscale_factor=3.0)
        if opn in ("sum", "avg") else [])
run("gar.empty", lambda: [mx.nd.array([len(hvd.grouped_allreduce([]))])])

# broadcast
for dtype, shape, root in itertools.product(DTYPES, SHAPES, range(size)):
    seed += 1
    x = data(seed, rank, shape, dtype, "special")
    case = "bc.%s.%s.root%d" % (dtype, "x".join(map(str, shape)), root)
    run(case, lambda: [hvd.broadcast(nd(x), root_rank=root, name=case)])
    run(case + ".inplace", lambda: [hvd.broadcast_(nd(x), root_rank=root, name=case + ".ip")])

# allgather: first dims per rank, 0 included
for dtype, firsts, trail in itertools.product(DTYPES, [(3, 3, 3), (0, 2, 5), (4, 0, 0), (0, 0, 0), (1, 7, 2)],
                                               [(), (3,), (2, 0), (2, 3)]):
    seed += 1
    x = data(seed, rank, (firsts[rank],) + trail, dtype, "special")
    case = "ag.%s.%s.%s" % (dtype, "-".join(map(str, firsts)), "x".join(map(str, trail)) or "1d")
    run(case, lambda: [hvd.allgather(nd(x), name=case)])
for dtype in ["int8", "float32", "float64"]:
    seed += 1
    xs = [data(seed + k, rank, (rank + k, 2), dtype) for k in range(3)]
    run("gag." + dtype, lambda: hvd.grouped_allgather([nd(a) for a in xs], name="gag" + dtype))

# alltoall
for dtype, pattern, trail in itertools.product(DTYPES, ["equal", "ranked", "zeros", "skew"], [(), (3,), (2, 2)]):
    seed += 1
    if pattern == "equal":
        splits = None
        first = 2 * size
    else:
        if pattern == "ranked":
            splits = [rank + 1] * size
        elif pattern == "zeros":
            splits = [0 if (j + rank) % 2 else j + 1 for j in range(size)]
        else:
            splits = [5 if j == rank else 0 for j in range(size)]
        first = sum(splits) + (1 if pattern == "skew" else 0)
    x = data(seed, rank, (first,) + trail, dtype, "special")
    case = "a2a.%s.%s.%s" % (dtype, pattern, "x".join(map(str, trail)) or "1d")
    if splits is None:
        run(case, lambda: [hvd.alltoall(nd(x), name=case)])
    else:
        run(case, lambda: list(hvd.alltoall(nd(x), splits=mx.nd.array(splits, dtype="int32"), name=case)))
        run(case + ".list", lambda: list(hvd.alltoall(nd(x), splits=splits, name=case + ".l")))
        run(case + ".np", lambda: list(hvd.alltoall(nd(x), splits=np.array(splits, dtype="int32"),
                                                     name=case + ".n")))

# reducescatter
for dtype, opn, first, trail in itertools.product(DTYPES, ["sum", "avg"], [size * 2, size * 2 + 1, size - 1, 1, 0],
                                                  [(), (3,), (2, 2)]):
    seed += 1
    x = data(seed, rank, (first,) + trail, dtype)
    case = "rs.%s.%s.%d.%s" % (dtype, opn, first, "x".join(map(str, trail)) or "1d")
    run(case, lambda: [hvd.reducescatter(nd(x), op=OPS[opn], name=case)])
for opn in ["sum", "avg"]:
    seed += 1
    xs = [data(seed + k, rank, (size * 2 + k, 3), DTYPES[k % len(DTYPES)]) for k in range(7)]
    run("grs." + opn, lambda: hvd.grouped_reducescatter([nd(a) for a in xs], op=OPS[opn], name="grs" + opn))
    run("grs.scaled." + opn, lambda: hvd.grouped_reducescatter([nd(a) for a in xs], op=OPS[opn],
                                                               name="grss" + opn, prescale_factor=0.25,
                                                               postscale_factor=3.0))

# objects
run("bo", lambda: [np.frombuffer(repr(hvd.broadcast_object({"a": rank, "b": [1, 2]} if rank == 0 else {},
                                                             root_rank=0)).encode(), "uint8")])
run("ago", lambda: [np.frombuffer(repr(hvd.allgather_object(("x" * rank, rank))).encode(), "uint8")])

mx.nd.waitall()
print("RANK %d OK" % rank, flush=True)
hvd.shutdown()
