"""Groups of tensors through the hierarchical allreduce between hosts, reduced where they
lie (argv[1]: the timeline file rank 0 writes). Link slices of a few KiB (set by the test)
cut the group so that most slices span two or more tensors and are staged, some lie within
one tensor, and empty tensors sit between them. Values are checked on every rank against
numpy; rank 0 then checks in the timeline that no group was packed into the fusion buffer
and that a group's tensors completed one by one as their slices left the pipeline."""
import json
import sys

import mxnet as mx
import numpy as np

import mxhorovod as hvd

hvd.init()
r, n = hvd.rank(), hvd.size()
timeline = sys.argv[1]
hvd.start_timeline(timeline)

# Sizes around the slice (4 KiB: 1,024 float32): within one slice, across two, across
# many, one element, empty.
SIZES = [1000, 0, 37, 5000, 1, 0, 2048, 777, 3333]


def data(rank, size, dtype, k):
    rng = np.random.RandomState(1000 * k + rank)
    if dtype.startswith("int"):
        return rng.randint(-50, 50, size).astype(dtype)
    return rng.uniform(-2, 2, size).astype(dtype)


checks = []
k = 0
for dtype in ("float32", "float16", "float64", "int32"):
    for op in (hvd.Sum, hvd.Average):
        k += 1
        xs = [[data(q, s, dtype, k * 100 + i) for i, s in enumerate(SIZES)] for q in range(n)]
        mine = [mx.nd.array(x, dtype=dtype) for x in xs[r]]
        name = "hg.%s.%d" % (dtype, op)
        if k % 2:
            outs = hvd.grouped_allreduce(mine, op=op, name=name)
        else:
            outs = mine
            hvd.grouped_allreduce_(mine, op=op, name=name)
        wants = []
        for i in range(len(SIZES)):
            total = np.sum([xs[q][i].astype(np.float64) for q in range(n)], axis=0)
            wants.append(total / n if op == hvd.Average else total)
        checks.append((name, dtype, outs, wants))

for name, dtype, outs, wants in checks:
    for i, (got, want) in enumerate(zip(outs, wants)):
        got = got.asnumpy()
        assert got.dtype == np.dtype(dtype) and got.shape == (SIZES[i],), (name, i, got.dtype, got.shape)
        if dtype == "int32":
            np.testing.assert_array_equal(got, np.trunc(want).astype(dtype), err_msg="%s[%d]" % (name, i))
        else:
            tol = 2e-2 if dtype == "float16" else 1e-5
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=tol, atol=tol,
                                       err_msg="%s[%d] on rank %d" % (name, i, r))

hvd.stop_timeline()
if r == 0:
    with open(timeline) as f:
        events = json.load(f)
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    groups = {p for p, nm in names.items() if nm.startswith("hg.")}
    assert groups, sorted(names.values())[:10]
    packed = sorted({names[e["pid"]] for e in events
                     if e.get("pid") in groups and e.get("name") == "MEMCPY_IN_FUSION_BUFFER"})
    assert not packed, "packed into the fusion buffer: %s" % packed
    reduced = {names[e["pid"]] for e in events if e.get("pid") in groups and e.get("name") == "MPI_ALLREDUCE"}
    assert len(reduced) >= 8, sorted(reduced)
    # Each tensor completes once its slices have left the pipeline, not at the group's end:
    # the first tensor's row is closed (its MPI_ALLREDUCE and its operation end) before the
    # last tensor's row records any end. An integer Average is divided after the whole group
    # (exactly, by the executor), so there the first tensor waits for the group's end.
    closes = {}  # row -> positions in the file of its end events after MPI_ALLREDUCE began
    for at, e in enumerate(events):
        if e.get("pid") not in groups:
            continue
        if e.get("name") == "MPI_ALLREDUCE":
            closes[names[e["pid"]]] = []
        elif e.get("ph") == "E" and names[e["pid"]] in closes:
            closes[names[e["pid"]]].append(at)
    first, last = 0, len(SIZES) - 1
    for name, dtype, _, _ in checks:
        rows = sorted(nm for nm in closes if nm.startswith(name + "."))
        assert len(rows) == len(SIZES), (name, rows)
        one, other = closes["%s.%d" % (name, first)], closes["%s.%d" % (name, last)]
        assert len(one) == len(other) == 2, (name, one, other)
        early = max(one) < min(other)
        whole = dtype == "int32" and name.endswith(".%d" % hvd.Average)
        assert early != whole, (name, one, other)
hvd.shutdown()
print("RANK %d OK" % r, flush=True)
